'use strict';
// The transactional outbox: each applied event's external effect, sent
// exactly once.
//
// An external effect (a payment, an email, a webhook) can never commit
// atomically with the database. So the claim's transaction does not make
// it: it inserts an outbox row next to the marker and the effect, and the
// row commits or rolls back with them (impl.js). After the commit, a relay
// sends each row to the destination and deletes it only once the
// destination has acknowledged it with a 2xx.
//
// - Every request for an event carries the same Idempotency-Key, derived
//   from the event's identity alone, so a retry after a lost answer, a
//   resend by another process, or a resend after a crash is a replay that
//   the destination does not process again.
// - A failed send (an error status, a refused connection, a timeout)
//   leaves the row in place and is retried with exponential backoff.
// - A process killed between its commit and its send loses nothing: the
//   row is in the database, and the next process's relay sends it when it
//   starts.
// - Several processes relay one table at once; FOR UPDATE SKIP LOCKED
//   hands each row to one of them at a time.
//
// Node.js's http module for HTTP; node-postgres for the table.

const crypto = require('node:crypto');
const http = require('node:http');
const { log } = require('./protocol');

const BATCH = 100; // rows one relay pass locks and sends, in order
const BACKOFF_MIN_MS = 50; // between failed passes, doubling...
const BACKOFF_MAX_MS = 2000; // ...up to this
const IDLE_POLL_MS = 1000; // a relay with nothing to do looks again this often
const DRAIN_POLL_MAX_MS = 200; // drain looks at the table at least this often
const SEND_TIMEOUT_MS = 10000;

/** The SQL that creates the outbox table unless it exists (no lock when it does). */
function createTable(table) {
  return `CREATE TABLE IF NOT EXISTS ${table} (
    seq            bigserial PRIMARY KEY,
    namespace      bytea NOT NULL,
    event_id       bytea NOT NULL,
    payload_digest text  NOT NULL
  )`;
}

/** Inserts an event's effect in the claim's transaction, on its client: it commits with the claim or not at all. */
async function enqueue(client, table, namespace, eventId, payloadDigest) {
  await client.query(`INSERT INTO ${table} (namespace, event_id, payload_digest) VALUES ($1, $2, $3)`,
    [namespace, eventId, payloadDigest]);
}

/**
 * A key derived from the identity alone: the same as Go's
 * adapters/external.Key,
 * "harmless-v1-" + hex(sha256(uvarint(len(namespace)) + namespace + id)).
 * The namespace's length is hashed too, so no split of the same bytes into
 * namespace and id collides with another.
 */
function idempotencyKey(namespace, eventId) {
  const length = [];
  let n = namespace.length;
  while (n >= 0x80) {
    length.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  length.push(n);
  const hash = crypto.createHash('sha256');
  hash.update(Buffer.from(length));
  hash.update(namespace);
  hash.update(eventId);
  return 'harmless-v1-' + hash.digest('hex');
}

/** POSTs one effect; resolves once the destination acknowledged it (2xx), rejects otherwise. */
function send(destination, namespace, eventId, payloadDigest) {
  const body = JSON.stringify({
    // base64: an identity may hold bytes that are not UTF-8.
    namespace: namespace.toString('base64'),
    id: eventId.toString('base64'),
    payload_digest: payloadDigest,
  });
  const url = new URL(destination.replace(/\/+$/, '') + '/effects');
  return new Promise((resolve, reject) => {
    const request = http.request(url, {
      method: 'POST',
      // A connection per request: the destination closes each one, and a
      // kept-alive socket it closed would fail the next send for nothing.
      agent: false,
      timeout: SEND_TIMEOUT_MS,
      headers: {
        'Content-Type': 'application/json',
        'Content-Length': Buffer.byteLength(body),
        'Idempotency-Key': idempotencyKey(namespace, eventId),
      },
    }, (response) => {
      const chunks = [];
      response.on('data', (chunk) => chunks.push(chunk));
      response.on('error', reject);
      response.on('end', () => {
        if (response.statusCode >= 200 && response.statusCode < 300) {
          resolve();
        } else {
          const text = Buffer.concat(chunks).toString('utf8').slice(0, 200).trim();
          reject(new Error(`destination answered ${response.statusCode}: ${text}`));
        }
      });
    });
    request.on('timeout', () => request.destroy(new Error(`no answer within ${SEND_TIMEOUT_MS} ms`)));
    // A refused or dropped connection: the effect may have been processed,
    // and only a retry with the same key is safe.
    request.on('error', reject);
    request.end(body);
  });
}

/** A loop that sends the outbox's rows to the destination, after commit. */
class Relay {
  /**
   * pool is the node-postgres pool, or a Database (database.js), which is
   * told why a pass failed; table the outbox's quoted name. The first pass
   * starts at once: it sends what a killed process left behind.
   */
  constructor(pool, table, destination) {
    this.pool = pool;
    this.table = table;
    this.destination = destination;
    this.stopped = false;
    this.wakeUp = null; // resolves the current pause early
    this.woken = false; // a wake while a pass ran: pass again at once
    this.done = this.run();
  }

  /** Sends now: a claim just committed a row. */
  wake() {
    this.woken = true;
    if (this.wakeUp) this.wakeUp();
  }

  /** Stops without draining: what is left stays in the table for the next process. */
  stop() {
    this.stopped = true;
    this.wake();
  }

  /** Waits ms, or until wake. */
  pause(ms) {
    if (this.woken) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wakeUp = () => {
        clearTimeout(timer);
        resolve();
      };
    }).finally(() => {
      this.wakeUp = null;
    });
  }

  async run() {
    let backoff = BACKOFF_MIN_MS;
    while (!this.stopped) {
      this.woken = false;
      let done;
      try {
        done = await this.pass();
      } catch (err) {
        // A lost connection, a server restart: retry.
        log('relay:', err.message);
        done = false;
      }
      let pause;
      if (done) {
        backoff = BACKOFF_MIN_MS;
        pause = IDLE_POLL_MS;
      } else {
        pause = backoff;
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      }
      await this.pause(pause);
    }
  }

  /** Sends pending rows in order until one fails; resolves whether none is left to send. */
  async pass() {
    const client = await this.pool.connect();
    let failed;
    try {
      await client.query('BEGIN');
      const { rows } = await client.query(
        `SELECT seq, namespace, event_id, payload_digest FROM ${this.table} ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`,
        [BATCH]);
      const sent = [];
      for (const row of rows) {
        try {
          await send(this.destination, row.namespace, row.event_id, row.payload_digest);
        } catch (err) {
          log(`relay: effect ${row.seq} not acknowledged, will retry: ${err.message}`);
          break;
        }
        sent.push(row.seq);
      }
      // Only acknowledged rows go. A crash before this commit leaves them
      // to be sent again, with the same key: a replay.
      if (sent.length > 0) {
        await client.query(`DELETE FROM ${this.table} WHERE seq = ANY($1::bigint[])`, [sent]);
      }
      await client.query('COMMIT');
      return sent.length === rows.length && rows.length < BATCH;
    } catch (err) {
      failed = err;
      if (typeof this.pool.failed === 'function') this.pool.failed(err, client);
      throw err;
    } finally {
      // A client whose transaction failed is discarded, not reused.
      client.release(failed);
    }
  }

  /**
   * Resolves once every row committed before the call has been
   * acknowledged and deleted. Rows another process's relay is sending
   * count too: they are deleted only when that send is acknowledged.
   */
  async drain() {
    const { rows } = await this.pool.query(`SELECT max(seq) AS last FROM ${this.table}`);
    const last = rows[0].last;
    let pause = BACKOFF_MIN_MS;
    while (last !== null && !this.stopped) {
      this.wake();
      const left = await this.pool.query(`SELECT EXISTS (SELECT 1 FROM ${this.table} WHERE seq <= $1) AS left`, [last]);
      if (!left.rows[0].left) return;
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, DRAIN_POLL_MAX_MS);
    }
  }
}

module.exports = { createTable, enqueue, idempotencyKey, send, Relay };
