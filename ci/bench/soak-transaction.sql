-- One delivery of the reference adapter (adapters/reference/store.go
-- Store.Process with the ledger effect of internal/effect), as a pgbench
-- custom script. ci/bench-soak.sh replaces {{schema}} and {{ledger}} and
-- sets, with -D, the variables the Go side computes per delivery:
--   ns      the namespace ("soak", as the soak's generator)
--   digest  the payload's SHA-256 as bytea hex input (the marker's digest)
--   hexdigest the same as 64 hex digits (the ledger's payload_digest)
--   at      the marker's processed_at
--   attempt the delivery attempt (1: no failures, no redeliveries)
--   n       the per-client event counter's start (0)
-- Every transaction claims a new event id, like a soak without duplicates:
-- pgbench keeps a client's variables from one transaction to the next, so
-- :n counts this client's deliveries and client_id keeps clients apart.
\set n :n + 1
\set id :client_id * 10000000000 + :n
BEGIN;
INSERT INTO {{schema}}.processed_events (namespace, event_id, payload_digest, processed_at)
VALUES (:ns, :id, :digest, :at) ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true;
INSERT INTO {{ledger}} (namespace, event_id, payload_digest, attempt) VALUES (:ns, :id, :hexdigest, :attempt);
END;
