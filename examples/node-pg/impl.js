'use strict';
// Duplicate-harmless event processing on PostgreSQL with node-postgres (pg).
//
// This is harmless's reference pattern (adapters/reference) written for
// Node.js, as an implementation harmless certifies over its exec protocol:
//
//     harmless certify --exec "node examples/node-pg/impl.js"
//
// Every event has a stable identity: its namespace and id, both bytes. A
// table of processed events has a unique key on (namespace, event_id). To
// process a delivery, one transaction:
//
// 1. claims the identity:
//    INSERT INTO processed_events (...) VALUES (...)
//    ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true;
// 2. runs the harness's effect only if a row came back, in the same
//    transaction, on the same client;
// 3. commits, so marker and effect are durable together or not at all.
//
// A concurrent delivery of the same identity blocks on the unique index
// until the claimant's transaction ends: it then finds the marker
// (duplicate) or, if the claimant rolled back, claims the event itself. A
// failure anywhere before COMMIT rolls the marker back with the effect, so
// the event stays eligible for redelivery.
//
// The marker stores the SHA-256 digest of the payload: a delivery whose
// identity is already claimed is a duplicate when the digests are equal,
// and is rejected when they differ (conflict policy "reject").
//
// Markers are kept for the redelivery window and purged after it: a purge
// removes the markers claimed before its cutoff.
//
// The event's external effect (the call to the destination harmless gives
// in setup) goes through a transactional outbox (outbox.js): step 2 also
// inserts an outbox row, and after the commit a relay sends it with an
// idempotency key derived from the identity, retrying until the
// destination acknowledges it. Without a destination there is no external
// effect to make.

// stdout is the protocol channel: a library that logs with console.log
// would write a line there that is not the protocol, which harmless treats
// as a crash. Send console.log (and its aliases) to stderr, before
// anything else loads.
console.log = console.info = console.debug = console.error;

const crypto = require('node:crypto');
const hp = require('./protocol');
const outbox = require('./outbox');
const { Database } = require('./database');

let pg;
try {
  pg = require('pg');
} catch (err) {
  hp.log(`node-postgres is missing (${err.code || err.message}): run npm ci in ${__dirname}`);
  process.exit(3);
}

const DECLARATIONS = {
  name: 'node-pg',
  version: '1.0.0',
  conflict_policy: 'reject',
  redelivery_window_s: 86400,
  accepts_clock: true,
  external_effects: 'outbox',
  max_in_flight: 16,
};

// A longer identity would not fit the unique index (a B-tree entry holds
// about 2.7 kB) and would fail at the database on every redelivery, for
// ever.
const MAX_IDENTITY_BYTES = 1024;

const APPLIED = 'applied';
const DUPLICATE = 'duplicate';
const REJECTED = 'rejected';

const utf8 = new TextDecoder('utf-8', { fatal: true });

function isUtf8(bytes) {
  try {
    utf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/** b for messages: readable, short, with invalid UTF-8 and control bytes escaped. */
function show(b, limit = 64) {
  let text = '';
  for (const byte of b.subarray(0, limit)) {
    text += byte >= 0x20 && byte < 0x7f ? String.fromCharCode(byte) : `\\x${byte.toString(16).padStart(2, '0')}`;
  }
  return b.length > limit ? `${text}...(${b.length} bytes)` : text;
}

/** A double-quoted SQL identifier. */
function quoteIdent(name) {
  return '"' + name.replace(/"/g, '""') + '"';
}

// How deliver's effect_args are decoded, by effect param type: bytea
// travels as base64, text as a string, int4 as a number (docs/protocol.md).
// node-postgres sends a Buffer as bytea, a string and a number as text,
// which the server reads as the type of the column the placeholder fills.
const ARG_DECODERS = {
  bytea: (v, what) => hp.decodeBase64(v, what),
  text: (v, what) => expect(v, hp.isString, 'a string', what),
  int4: (v, what) => expect(v, (x) => Number.isInteger(x) && x >= -2147483648 && x <= 2147483647, 'an int4', what),
};

function expect(value, is, kind, what) {
  if (!is(value)) {
    throw new hp.ProtocolError(hp.INVALID_INPUT, `${what} must be ${kind}, got ${JSON.stringify(value)}`.slice(0, 200));
  }
  return value;
}

/** The harness's effect: a statement to run, with $1... placeholders, when an event is claimed. */
class Effect {
  constructor(params) {
    this.sql = hp.field(params, 'sql', 'a string', hp.isString);
    // node-postgres takes $1, $2, ... placeholders, as the harness writes
    // them: the statement is passed unchanged.
    this.types = hp.field(params, 'params', 'an array', hp.isArray).map((p, i) => {
      if (!hp.isObject(p)) throw new hp.ProtocolError(hp.INVALID_INPUT, `effect.params[${i}] must be an object`);
      return hp.field(p, 'type', 'a string', hp.isString);
    });
    const unknown = this.types.filter((t) => !(t in ARG_DECODERS));
    if (unknown.length > 0) {
      throw new hp.ProtocolError(hp.UNSUPPORTED, `effect param types ${JSON.stringify(unknown)} are not supported`);
    }
  }

  /** deliver's effect_args, decoded for node-postgres. */
  args(values) {
    if (values.length !== this.types.length) {
      throw new hp.ProtocolError(hp.INVALID_INPUT, `effect_args has ${values.length} values for ${this.types.length} params`);
    }
    return values.map((v, i) => ARG_DECODERS[this.types[i]](v, `effect_args[${i}]`));
  }
}

/** One deliver request, decoded. */
class Delivery {
  constructor(params) {
    const payload = hp.bytesField(params, 'payload');
    this.namespace = hp.bytesField(params, 'namespace');
    this.eventId = hp.bytesField(params, 'event_id');
    this.digest = crypto.createHash('sha256').update(payload).digest(); // stored in the marker
    this.now = hp.timeField(params, 'now'); // the harness's clock: when the marker is claimed
    this.effectArgs = hp.field(params, 'effect_args', 'an array', hp.isArray);
  }

  toString() {
    return `${show(this.namespace)}/${show(this.eventId)}`;
  }

  /**
   * Refuses, as invalid input, identities the marker cannot hold
   * faithfully. The same rules as the Go reference
   * (adapters/internal/kit.Validate) and the Python example, so that all
   * answer the bad-input fixture alike: retrying such an event could never
   * succeed, so it is refused instead of failing transiently.
   */
  validate() {
    let problem;
    if (this.namespace.length > MAX_IDENTITY_BYTES || this.eventId.length > MAX_IDENTITY_BYTES) {
      problem = `namespace and id may have at most ${MAX_IDENTITY_BYTES} bytes each`;
    } else if (this.eventId.length === 0) {
      problem = 'empty id';
    } else if (!isUtf8(this.namespace) || !isUtf8(this.eventId)) {
      problem = 'identity is not valid UTF-8';
    } else if (this.namespace.includes(0) || this.eventId.includes(0)) {
      problem = 'identity contains a NUL byte';
    } else {
      return;
    }
    throw new hp.ProtocolError(hp.INVALID_INPUT, `event ${this}: ${problem}`);
  }
}

/**
 * Runs work(client) in a transaction on a client of db, and commits.
 * Any failure rolls back and is answered transient: a database error, a
 * terminated or cut connection, a server that crashed or failed over. A
 * client whose connection failed is discarded (release(err)), never
 * handed out again, and db learns why, so that it can choose the primary
 * again.
 */
async function transaction(db, what, work) {
  let client;
  try {
    client = await db.connect();
  } catch (err) {
    throw new hp.ProtocolError(hp.TRANSIENT, `${what}: connect: ${err.message}`);
  }
  let broken;
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    // The transaction is over: rolled back by ROLLBACK, by a failed
    // COMMIT, or with the connection. A client that cannot even roll back
    // has lost its connection, and is discarded.
    await client.query('ROLLBACK').catch((e) => { broken = e; });
    if (err instanceof hp.ProtocolError) throw err;
    db.failed(err, client);
    const sqlstate = err.code ? ` (SQLSTATE ${err.code})` : '';
    throw new hp.ProtocolError(hp.TRANSIENT, `${what}: ${err.message}${sqlstate}`);
  } finally {
    client.release(broken);
  }
}

class Implementation {
  constructor(declarations) {
    this.declarations = declarations;
    this.state = null; // set by setup
  }

  async setup(params) {
    const schema = hp.field(params, 'schema', 'a string', hp.isString);
    const destination = params.destination;
    if (destination !== undefined && !hp.isString(destination)) {
      throw new hp.ProtocolError(hp.INVALID_INPUT, 'param "destination" must be a string');
    }
    const effect = new Effect(hp.field(params, 'effect', 'an object', hp.isObject));
    // The DSN in parts, since node-postgres reads one host only: every
    // host and port, in order (harmless's faults reach the connections
    // through them, and a failover is followed by trying them again), the
    // user, password and database, and the parameters. Never log them:
    // they carry the run's password. One connection per request in
    // flight, one for the relay, and as many again for requests harmless
    // gave up on that still hold theirs.
    const db = new Database(pg, params.connection, 2 * this.declarations.max_in_flight + 1);
    const s = {
      db,
      effect,
      table: `${quoteIdent(schema)}.${quoteIdent('processed_events')}`,
      outbox: `${quoteIdent(schema)}.${quoteIdent('outbox')}`,
      relay: null,
    };
    try {
      await transaction(db, 'setup', async (client) => {
        // Several processes may set up one schema at once, and two
        // concurrent CREATE ... IF NOT EXISTS of one table can both try to
        // create it (one then fails on the catalog's unique index); the
        // lock makes them take turns.
        await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [schema]);
        // Other processes may hold deliveries in flight on the table.
        // CREATE TABLE IF NOT EXISTS takes no lock on a table that exists,
        // but CREATE INDEX IF NOT EXISTS takes a SHARE lock even when the
        // index exists, and would wait for every one of them: look the
        // index up instead, and create it only when it is missing.
        await client.query(`CREATE TABLE IF NOT EXISTS ${s.table} (
          namespace      bytea       NOT NULL,
          event_id       bytea       NOT NULL,
          payload_digest bytea       NOT NULL,
          processed_at   timestamptz NOT NULL,
          PRIMARY KEY (namespace, event_id)
        )`);
        // Purge finds expired markers by processed_at.
        const index = await client.query('SELECT to_regclass($1) IS NULL AS missing',
          [`${quoteIdent(schema)}.${quoteIdent('processed_events_processed_at')}`]);
        if (index.rows[0].missing) {
          await client.query(`CREATE INDEX processed_events_processed_at ON ${s.table} (processed_at)`);
        }
        await client.query(outbox.createTable(s.outbox));
      });
    } catch (err) {
      await db.end(1000);
      throw err;
    }
    if (destination) {
      // Its first pass sends what a process killed after its commit left.
      s.relay = new outbox.Relay(db, s.outbox, destination);
    }
    this.state = s;
    hp.log(`set up in schema ${schema}`);
    return {};
  }

  async deliver(params) {
    const s = this.configured();
    const d = new Delivery(params);
    d.validate();
    const effectArgs = s.effect.args(d.effectArgs);
    const outcome = await transaction(s.db, `deliver ${d}`, async (client) => {
      // One statement decides, atomically under the unique key: a SELECT
      // followed by an INSERT would let two concurrent deliveries both
      // find nothing and both apply the effect.
      const claim = await client.query(
        `INSERT INTO ${s.table} (namespace, event_id, payload_digest, processed_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`,
        [d.namespace, d.eventId, d.digest, d.now]);
      if (claim.rowCount === 0) {
        return this.compare(client, s.table, d);
      }
      await client.query(s.effect.sql, effectArgs);
      if (s.relay) {
        // The external effect commits with the claim, as a row the relay
        // sends: never from inside the transaction.
        await outbox.enqueue(client, s.outbox, d.namespace, d.eventId, d.digest.toString('hex'));
      }
      return APPLIED;
    });
    if (outcome === APPLIED && s.relay) s.relay.wake();
    return { outcome };
  }

  /** Classifies a delivery whose identity is already claimed, by payload digest. */
  async compare(client, table, d) {
    const { rows } = await client.query(`SELECT payload_digest FROM ${table} WHERE namespace = $1 AND event_id = $2`,
      [d.namespace, d.eventId]);
    if (rows.length === 0) {
      // Purged between the claim and this read: let harmless redeliver.
      throw new hp.ProtocolError(hp.TRANSIENT, `deliver ${d}: the marker vanished during the conflict check; retry`);
    }
    return rows[0].payload_digest.equals(d.digest) ? DUPLICATE : REJECTED;
  }

  /** Removes the markers claimed before the cutoff; those at or after it stay. */
  async purge(params) {
    const s = this.configured();
    const cutoff = hp.timeField(params, 'cutoff');
    const removed = await transaction(s.db, `purge before ${cutoff}`, async (client) => {
      const r = await client.query(`DELETE FROM ${s.table} WHERE processed_at < $1`, [cutoff]);
      return r.rowCount;
    });
    return { removed };
  }

  /** Answers once every external effect committed before now has been acknowledged. */
  async drain() {
    const s = this.configured();
    if (s.relay) {
      try {
        await s.relay.drain();
      } catch (err) {
        throw new hp.ProtocolError(hp.TRANSIENT, `drain: ${err.message}`);
      }
    }
    return {};
  }

  async close() {
    // The relay stops without draining: what it has not sent stays in the
    // outbox for the next process.
    const s = this.state;
    if (s === null) return;
    if (s.relay) s.relay.stop();
    // Bounded: a client a request harmless gave up on still holds would
    // keep pool.end() waiting.
    await s.db.end(1000);
  }

  configured() {
    if (this.state === null) {
      throw new hp.ProtocolError(hp.TRANSIENT, 'setup has not completed');
    }
    return this.state;
  }
}

/** Serves the implementation, with the max_in_flight the command line asks for. */
function main(argv) {
  const declarations = { ...DECLARATIONS };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    if (flag !== '--max-in-flight') {
      hp.log(`usage: node impl.js [--max-in-flight N]; unknown argument ${JSON.stringify(argv[i])}`);
      process.exit(2);
    }
    const value = inline !== undefined ? inline : argv[++i];
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1 || n > 1024) {
      hp.log(`--max-in-flight must be between 1 and 1024, not ${JSON.stringify(value)}`);
      process.exit(2);
    }
    declarations.max_in_flight = n;
  }
  hp.serve(new Implementation(declarations));
}

if (require.main === module) {
  main(process.argv.slice(2));
}

module.exports = { Implementation, Delivery, Effect, DECLARATIONS };
