-- The tables a soak of the reference adapter writes to, in a schema of the
-- benchmark's own: ci/bench-soak.sh replaces {{schema}} with the quoted
-- schema and {{ledger}} with the quoted ledger table, then appends
-- faults/plan.sql (the fault points every soak schema has on its ledger).
-- Keep it in step with ledger.Install (internal/ledger/ledger.go) and
-- reference.Store.Migrate (adapters/reference/store.go).

CREATE SCHEMA {{schema}};
COMMENT ON SCHEMA {{schema}} IS 'harmless bench-soak: dropped when ci/bench-soak.sh exits';

-- ledger.Install
CREATE TABLE {{ledger}} (
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace      bytea   NOT NULL,
    event_id       bytea   NOT NULL,
    payload_digest text    NOT NULL,
    attempt        integer NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    backend_pid    integer NOT NULL DEFAULT pg_backend_pid()
);

-- reference.Store.Migrate
CREATE TABLE {{schema}}.processed_events (
    namespace      text        NOT NULL,
    event_id       text        NOT NULL,
    payload_digest bytea       NOT NULL,
    processed_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, event_id)
);
CREATE INDEX processed_events_processed_at ON {{schema}}.processed_events (processed_at);
