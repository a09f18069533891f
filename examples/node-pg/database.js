'use strict';
// The database, as node-postgres reaches it from setup's `connection`.
//
// node-postgres reads one host from a connection string, and takes the
// first of a list as a host name ("127.0.0.1,127.0.0.1" does not resolve).
// So the child is configured from the DSN in parts, which harmless sends
// beside it in setup (docs/protocol.md): every host and port, in the DSN's
// order, the user, the password, the database, and the other parameters.
//
// On one host, that is one pg.Pool, which replaces the connections it
// loses by itself. On several (a replicated formation, where harmless
// fails the primary over), it does what libpq and pgx do with a multi-host
// DSN and target_session_attrs=read-write: it tries the hosts in order and
// keeps the first one where `SHOW transaction_read_only` answers `off`,
// the primary, with a pool to it. After an error that says the primary may
// have moved (a lost or refused connection, a server shutting down, a
// write refused as read-only), it chooses again, at the next connect, so
// a redelivery reaches the new primary without a restart.
//
// Every host and port is kept, in order: harmless's faults reach the
// child's connections through them, and a failover is followed by trying
// them again. application_name is only a courtesy (harmless does not
// recognise connections by it), kept here because nothing else names the
// sessions.

const { log, ProtocolError, INVALID_INPUT, UNSUPPORTED, isArray, isObject, isString } = require('./protocol');

// The parameters node-postgres sends in its startup message, by the name
// libpq gives them, which is also node-postgres's.
const STARTUP_PARAMETERS = ['application_name', 'fallback_application_name', 'options', 'statement_timeout', 'lock_timeout',
  'idle_in_transaction_session_timeout', 'client_encoding'];

// How long trying one host may take before the next is tried, unless the
// DSN's connect_timeout says otherwise. Pools get no default: node-postgres
// times out a wait for a free client with the same setting.
const DEFAULT_PROBE_TIMEOUT_MS = 5000;

/**
 * node-postgres's ssl setting for libpq's sslmode. node-postgres has no
 * fallback between TLS and plain: "allow" and "prefer" connect in plain
 * (what "allow" tries first and "prefer" falls back to); "require"
 * encrypts without checking the certificate, as libpq does without a root
 * certificate; "verify-ca" checks the certificate, "verify-full" the host
 * name too.
 */
function sslOf(sslmode) {
  switch (sslmode) {
    case undefined:
    case 'disable':
    case 'allow':
    case 'prefer':
      return false;
    case 'require':
      return { rejectUnauthorized: false };
    case 'verify-ca':
      return { rejectUnauthorized: true, checkServerIdentity: () => undefined };
    case 'verify-full':
      return { rejectUnauthorized: true };
  }
  throw new ProtocolError(UNSUPPORTED, `sslmode ${JSON.stringify(sslmode)} is not one libpq knows`);
}

/**
 * Reads setup's `connection` into what a Database needs: the hosts (with
 * their ports), the pg config they share, and whether a host must take
 * writes. Anything malformed is invalid input: the same setup would fail
 * again.
 */
function configOf(connection) {
  if (!isObject(connection)) {
    throw new ProtocolError(INVALID_INPUT, 'param "connection" must be an object: the DSN in parts, which harmless sends in setup');
  }
  const { hosts, ports, user, password, database, parameters } = connection;
  if (!isArray(hosts) || hosts.length === 0 || !hosts.every(isString)) {
    throw new ProtocolError(INVALID_INPUT, 'connection.hosts must be a non-empty array of strings');
  }
  if (!isArray(ports) || ports.length !== hosts.length || !ports.every((p) => Number.isInteger(p) && p >= 1 && p <= 65535)) {
    throw new ProtocolError(INVALID_INPUT, 'connection.ports must hold a port for each host');
  }
  for (const [name, value] of Object.entries({ user, password, database })) {
    if (!isString(value)) throw new ProtocolError(INVALID_INPUT, `connection.${name} must be a string`);
  }
  if (!isObject(parameters) || !Object.values(parameters).every(isString)) {
    throw new ProtocolError(INVALID_INPUT, 'connection.parameters must be an object of strings');
  }
  // "" means the driver's default: left out, node-postgres applies its own.
  const shared = {
    user: user || undefined,
    password: password || undefined,
    database: database || undefined,
    ssl: sslOf(parameters.sslmode),
  };
  let writable = false;
  const ignored = [];
  for (const [name, value] of Object.entries(parameters)) {
    if (STARTUP_PARAMETERS.includes(name)) {
      shared[name] = value;
    } else if (name === 'connect_timeout') {
      const seconds = Number(value);
      // libpq: 0 (or none) waits for ever; at least 2 s otherwise.
      if (Number.isInteger(seconds) && seconds > 0) shared.connectionTimeoutMillis = Math.max(seconds, 2) * 1000;
    } else if (name === 'target_session_attrs') {
      if (value === 'read-write' || value === 'primary') {
        writable = true;
      } else if (value !== 'any') {
        throw new ProtocolError(UNSUPPORTED, `target_session_attrs ${JSON.stringify(value)} is not supported (read-write, primary and any are)`);
      }
    } else if (name !== 'sslmode') {
      ignored.push(name);
    }
  }
  if (ignored.length > 0) log(`connection parameters node-postgres has no setting for, ignored: ${ignored.join(', ')}`);
  return {
    hosts: hosts.map((host, i) => ({ host: host || undefined, port: ports[i] })),
    shared,
    writable,
  };
}

/** "host:port", for messages. */
function where(h) {
  return `${h.host === undefined ? '(default host)' : h.host}:${h.port}`;
}

/**
 * Whether err says the server we talk to may no longer be the primary: a
 * connection lost, refused or timed out (a Node.js error, with no
 * SQLSTATE), a connection exception (08...), a server shutting down or
 * starting (57P01 to 57P03), or a write refused as read-only (25006, a
 * primary demoted to standby).
 */
function mayHaveMoved(err) {
  const code = err && err.code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return true;
  return code === '25006' || code.startsWith('08') || /^57P0[1-3]$/.test(code);
}

/**
 * The database: connect() and query() as a pg.Pool's, on the primary.
 * failed(err, client) tells it a client's work failed, and why.
 */
class Database {
  /** pg is node-postgres; max is the size of each pool. */
  constructor(pg, connection, max) {
    this.pg = pg;
    this.config = configOf(connection);
    this.max = max;
    this.pool = null; // the pool to the chosen host
    this.choosing = null; // a promise of the pool being chosen
    this.poolOf = new WeakMap(); // client -> the pool it came from
    this.retired = []; // pools replaced, ending
    this.ended = false;
  }

  /** A new pool to one host, with 'error' listeners on it and on each of its clients. */
  newPool(h) {
    const pool = new this.pg.Pool({ ...this.config.shared, host: h.host, port: h.port, max: this.max });
    // node-postgres emits 'error' when a connection dies (a server
    // restart, a terminated backend, a cut connection); with no listener
    // Node.js throws it and the process dies with everything in flight.
    // The pool's listener covers idle clients; a checked-out client has
    // only its own, added once to each client the pool creates.
    pool.on('error', (err) => log('idle client lost:', err.message));
    pool.on('connect', (client) => client.on('error', (err) => log('client lost:', err.message)));
    return pool;
  }

  /**
   * Whether h is a host to keep: it accepts a connection and, when the
   * DSN asks for a writable session, is not read-only. Rejects with why not.
   */
  async probe(h) {
    const client = new this.pg.Client({
      connectionTimeoutMillis: DEFAULT_PROBE_TIMEOUT_MS, ...this.config.shared, host: h.host, port: h.port,
    });
    client.on('error', (err) => log(`probe of ${where(h)} lost:`, err.message));
    try {
      await client.connect();
      if (this.config.writable) {
        const { rows } = await client.query('SHOW transaction_read_only');
        if (rows[0].transaction_read_only !== 'off') throw new Error('read-only (a standby)');
      }
    } finally {
      await client.end().catch(() => {});
    }
  }

  /** The pool to the first host that will do, in the DSN's order. */
  async choose() {
    const { hosts } = this.config;
    if (hosts.length === 1) return this.newPool(hosts[0]); // nothing to choose: the pool reconnects by itself
    const refused = [];
    for (const h of hosts) {
      try {
        await this.probe(h);
        log(`connected to ${where(h)}${this.config.writable ? ', the primary' : ''}`);
        return this.newPool(h);
      } catch (err) {
        refused.push(`${where(h)}: ${err.message}`);
      }
    }
    throw new Error(`no host will do (${refused.join('; ')})`);
  }

  /** The current pool, chosen when there is none. */
  async current() {
    if (this.ended) throw new Error('the database is closed');
    if (this.pool) return this.pool;
    if (!this.choosing) {
      this.choosing = this.choose().then((pool) => {
        this.pool = pool;
        return pool;
      }).finally(() => {
        this.choosing = null;
      });
    }
    return this.choosing;
  }

  /** A client checked out of the current pool; release it as a pg.Pool's. */
  async connect() {
    const pool = await this.current();
    let client;
    try {
      client = await pool.connect();
    } catch (err) {
      this.retire(pool, err);
      throw err;
    }
    this.poolOf.set(client, pool);
    return client;
  }

  /** One statement on a client of the current pool, as pg.Pool's query. */
  async query(text, values) {
    const client = await this.connect();
    let failed;
    try {
      return await client.query(text, values);
    } catch (err) {
      failed = err;
      this.failed(err, client);
      throw err;
    } finally {
      client.release(failed);
    }
  }

  /** Tells the database that work on client failed with err: when the primary may have moved, choose again. */
  failed(err, client) {
    const pool = client && this.poolOf.get(client);
    if (pool) this.retire(pool, err);
  }

  /**
   * Stops handing out pool, when err says its host may no longer be the
   * primary and there are other hosts: the next connect chooses again. Its
   * clients in flight finish on it; it ends once they are released.
   */
  retire(pool, err) {
    if (this.config.hosts.length === 1 || pool !== this.pool || !mayHaveMoved(err)) return;
    log(`choosing the primary again after: ${err.message}${err.code ? ` (${err.code})` : ''}`);
    this.pool = null;
    this.retired.push(pool);
    pool.end().catch((e) => log('ending a retired pool:', e.message)).finally(() => {
      this.retired = this.retired.filter((p) => p !== pool);
    });
  }

  /** Ends every pool, waiting at most ms for clients still checked out. */
  async end(ms) {
    this.ended = true;
    const pools = [...this.retired];
    if (this.pool) pools.push(this.pool);
    if (this.choosing) pools.push(await this.choosing.catch(() => null));
    await Promise.race([
      Promise.all(pools.filter(Boolean).map((p) => p.end().catch(() => {}))),
      new Promise((resolve) => setTimeout(resolve, ms).unref()),
    ]);
  }
}

module.exports = { Database, configOf, mayHaveMoved };
