package faults

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is the connection the functions of this package run their statements
// on. *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it. It is declared here,
// rather than borrowed from the harness, so that code outside this module
// can call the package with its own connections.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// The connections DB is documented to accept.
var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = pgx.Tx(nil)
)
