// Package destination is the external destination of a play: an HTTP server
// on the loopback that stands for a payment or email API, to which an
// implementation under test sends the external effect of each event it
// applies (see package adapters/external for the wire format and a client).
//
// It honours idempotency keys as Stripe and the IETF Idempotency-Key draft
// do, for POST /effects with an Idempotency-Key header and a JSON body
// {"namespace", "id", "payload_digest"} (namespace and id in standard
// padded base64, the digest as adapters.PayloadDigest writes it):
//
//	request                                   answer
//	no key, bad key, bad body                 400, {"error": why}; not processed
//	first request with a key                  processed; 201 {"effect": n}
//	same key, same request                    the first answer replayed, with
//	                                          Idempotent-Replayed: true; not processed
//	same key, another request                 422; not processed
//	same key while its first is in progress   409; not processed
//	another path / method                     404 / 405
//
// Requests are compared decoded (identity bytes and digest), not as raw
// bytes, so that JSON spacing or field order does not matter. Keys belong to
// the server, not to an event: one key sent for two events is a 422.
//
// n in {"effect": n} is the number of times the destination processed that
// event identity, counting this one. [Server.Processed] reports these counts:
// they are kept in the harness's memory and advanced only by the
// destination's own handler, so an implementation can no more forge them
// than it can rewrite the ledger. The destination also records every
// POST /effects it read, and every connection it refused
// ([Server.Requests]); requests to other paths or with other methods are
// only logged.
//
// Faults are planned per event identity and per attempt, the n-th request
// the destination read for that event (from 1), like database faults, and
// each is a faults.Armed whose Fired counts its firings: [Server.Fail],
// [Server.DropAfterProcess], [Server.Slow], [Server.Hold], and the
// server-wide [Server.Down]. Fail, Hold and Down act before the idempotency
// layer, as a load balancer or a crash would: nothing is processed and no key
// is taken. Slow and DropAfterProcess act on the answer the idempotency layer
// gives.
//
// Keep-alives are off: every request comes on a fresh connection. Go's
// http.Transport silently resends a request that carries an Idempotency-Key
// when a reused connection closes without an answer; with fresh connections
// a dropped answer reaches the implementation's own code, whose retry is what
// the rules judge.
package destination
