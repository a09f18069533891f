package reference_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
)

// A service whose consumers share one schema gives each consumer a
// processed-events table of its own (Table), so that their markers and
// retention stay apart. Now is the clock that stamps the markers: the
// system's in production, and env.Clock.Now in the adapter's Factory when
// the adapter declares AcceptsClock, so that harmless's retention plays
// can move time by days.
func ExampleConfig() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	invoices := reference.NewStore(pool, reference.Config{
		Schema: "billing",
		Table:  "invoice_events_processed",
		Now:    time.Now,
	})
	if err := invoices.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	ev := adapters.Event{Namespace: "invoices", ID: "inv-1001", Payload: []byte(`{"amount":1200}`)}
	outcome, err := invoices.Process(ctx, ev, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO billing.invoices (id, amount) VALUES ($1, 1200)`, ev.ID)
		return err
	})
	if err != nil {
		fmt.Println(err) // nothing committed: leave the message to the broker's retry
		return
	}
	fmt.Println(outcome) // Applied, Duplicate or Rejected: acknowledge the message
}
