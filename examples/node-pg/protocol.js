'use strict';
// The child side of harmless's exec protocol, version 1 (docs/protocol.md).
//
// harmless starts an implementation as a child process and sends it one
// JSON request per line on stdin; the child answers each with one JSON
// line on stdout, in any order. This module is that loop, written once so
// that an implementation only supplies a handler:
//
// - hello is answered here, from the handler's declarations;
// - setup, deliver, purge and (when the handler has it) drain are started
//   as they arrive, without waiting for the ones in flight, so one process
//   handles as many at once as harmless sends it (at most the
//   max_in_flight it declared);
// - shutdown closes the handler and exits with status 0, and so does the
//   end of stdin, once the requests in flight are answered.
//
// A handler method returns (a promise of) the result object, or throws a
// ProtocolError to answer an error of its class. Anything else it throws
// is a bug or an unexpected failure: it is logged and answered transient,
// so one bad request never kills the process.
//
// stdout carries protocol messages only; logs go to stderr, which harmless
// quotes in its failure messages. Node.js's standard library only.

const readline = require('node:readline');

const PROTOCOL_VERSION = 1;

// Error classes (docs/protocol.md, "Error classes").
const TRANSIENT = 'transient';
const INVALID_INPUT = 'invalid_input';
const UNSUPPORTED = 'unsupported';

/** An error answer: the request failed with errorClass. */
class ProtocolError extends Error {
  constructor(errorClass, message) {
    super(message);
    this.errorClass = errorClass;
  }
}

let logName = 'harmless-child';

/** Writes one log line to stderr, never to stdout. */
function log(...args) {
  console.error(new Date().toISOString(), `${logName}[${process.pid}]`, ...args);
}

// --- Decoding params ---------------------------------------------------------
//
// A param the child cannot decode is answered invalid_input: the same request
// would fail the same way again, so it must not be retried.

function describe(value) {
  const text = JSON.stringify(value);
  return text === undefined ? String(value) : text.slice(0, 80);
}

/** The required param name of params, checked with is (a predicate) and named kind. */
function field(params, name, kind, is) {
  const value = params[name];
  if (!is(value)) {
    throw new ProtocolError(INVALID_INPUT, `param ${JSON.stringify(name)} must be ${kind}, got ${describe(value)}`);
  }
  return value;
}

const isString = (v) => typeof v === 'string';
const isInteger = (v) => Number.isSafeInteger(v);
const isArray = (v) => Array.isArray(v);
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * Decodes standard base64 with padding (RFC 4648) into the bytes it
 * carries. Buffer.from(s, 'base64') alone is lenient: it skips characters
 * that are not base64, accepts the URL alphabet and missing padding, so it
 * would turn a malformed param into other bytes. Encoding the bytes again
 * must give the text back. (Not a regular expression: a pattern such as
 * /^(?:[A-Za-z0-9+/]{4})*$/ exhausts V8's stack, "RangeError: Maximum
 * call stack size exceeded", on the 22 MB of the bad-input fixture's
 * 16 MiB payload.)
 */
function decodeBase64(value, what) {
  if (typeof value !== 'string') {
    throw new ProtocolError(INVALID_INPUT, `${what} must be a base64 string, got ${describe(value)}`);
  }
  const bytes = Buffer.from(value, 'base64');
  if (bytes.toString('base64') !== value) {
    throw new ProtocolError(INVALID_INPUT, `${what} is not standard base64 with padding: ${describe(value)}`);
  }
  return bytes;
}

/** The required base64 param name, decoded. */
function bytesField(params, name) {
  return decodeBase64(params[name], `param ${JSON.stringify(name)}`);
}

// RFC 3339 as harmless writes it: UTC, "Z", 0 to 6 fractional digits.
// Offsets and more digits are accepted too.
const RFC3339 = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/;

/**
 * The required RFC 3339 time param name, as a string for PostgreSQL.
 *
 * Not a Date: a JavaScript Date holds milliseconds, and harmless sends
 * microseconds (the precision of timestamptz). Truncated to milliseconds,
 * a marker claimed 0.4 ms before a purge's cutoff would compare equal to
 * it and survive the purge. The text goes to PostgreSQL as it is, which
 * parses it into a timestamptz exactly. More than six fractional digits
 * are truncated, never rounded, so equal times stay equal.
 */
function timeField(params, name) {
  const text = field(params, name, 'an RFC 3339 time', isString);
  const m = RFC3339.exec(text);
  if (m === null) {
    throw new ProtocolError(INVALID_INPUT, `param ${JSON.stringify(name)} is not an RFC 3339 time: ${describe(text)}`);
  }
  const [, seconds, fraction = '', offset] = m;
  return seconds + (fraction ? '.' + fraction.slice(0, 6) : '') + offset;
}

// --- The loop ----------------------------------------------------------------

function errorBody(errorClass, message) {
  return { error: { class: errorClass, message } };
}

/**
 * Speaks the protocol on stdin and stdout until shutdown or the end of
 * stdin. handler has `declarations` ({name, version, conflict_policy,
 * redelivery_window_s, accepts_clock, external_effects, max_send_delay_s,
 * max_in_flight}), async setup(params), deliver(params), purge(params),
 * optionally drain(params), and async close().
 */
function serve(handler) {
  const d = handler.declarations;
  logName = d.name;
  const methods = {
    setup: (p) => handler.setup(p),
    deliver: (p) => handler.deliver(p),
    purge: (p) => handler.purge(p),
  };
  if (typeof handler.drain === 'function') {
    methods.drain = (p) => handler.drain(p);
  }
  let inFlight = 0;
  let exiting = false;

  // A write to a pipe is synchronous on Linux: the line is out when write
  // returns, so there is nothing to flush. An EPIPE (harmless has gone)
  // arrives as an 'error' event, which would kill the process unheard.
  process.stdout.on('error', (err) => log('cannot write to stdout:', err.message));
  const answer = (id, body) => {
    process.stdout.write(JSON.stringify({ id, ...body }) + '\n');
  };

  const hello = (params) => {
    const offered = params.protocols;
    if (!Array.isArray(offered) || !offered.includes(PROTOCOL_VERSION)) {
      throw new ProtocolError(UNSUPPORTED, `harmless offers protocols ${describe(offered)}; this child speaks ${PROTOCOL_VERSION}`);
    }
    const declares = {
      conflict_policy: d.conflict_policy,
      redelivery_window_s: d.redelivery_window_s,
      accepts_clock: d.accepts_clock,
    };
    if (d.external_effects) declares.external_effects = d.external_effects;
    if (d.max_send_delay_s) declares.max_send_delay_s = d.max_send_delay_s;
    return {
      protocol: PROTOCOL_VERSION,
      implementation: { name: d.name, version: d.version },
      declares,
      max_in_flight: d.max_in_flight,
    };
  };

  const call = async (id, method, handle) => {
    try {
      return { result: await handle() };
    } catch (err) {
      if (err instanceof ProtocolError) {
        log(`request ${id} (${method}): ${err.errorClass}: ${err.message}`);
        return errorBody(err.errorClass, err.message);
      }
      // A bug, or a failure nobody classified: it costs this request only.
      log(`request ${id} (${method}) failed unexpectedly:`, err && err.stack ? err.stack : err);
      return errorBody(TRANSIENT, `${(err && err.name) || 'Error'}: ${(err && err.message) || err}`);
    }
  };

  const exit = async (closeHandler) => {
    exiting = true;
    if (closeHandler) {
      try {
        await handler.close();
      } catch (err) {
        log('close:', err.message);
      }
    }
    process.exit(0);
  };

  const shutdown = async (id) => {
    // Requests still in flight are past their deadline (harmless sends
    // shutdown only when it expects no more answers). Closing the pool
    // would wait for them; exiting drops their connections instead, and
    // the server rolls their transactions back.
    if (inFlight === 0) {
      await handler.close().catch((err) => log('close:', err.message));
    } else {
      log(`shutdown with ${inFlight} requests in flight; exiting without waiting for them`);
    }
    answer(id, { result: {} });
    await exit(false);
  };

  const onLine = (line) => {
    if (exiting) return;
    let request;
    try {
      request = JSON.parse(line);
    } catch (err) {
      log(`ignoring a line that is not JSON (${err.message}): ${line.slice(0, 200)}`);
      return;
    }
    const id = isObject(request) ? request.id : undefined;
    if (!Number.isSafeInteger(id) || id <= 0) {
      log(`ignoring a request without a positive integer id: ${line.slice(0, 200)}`);
      return;
    }
    const method = request.method;
    const params = request.params === undefined ? {} : request.params;
    if (typeof method !== 'string' || !isObject(params)) {
      answer(id, errorBody(INVALID_INPUT, 'method must be a string and params an object'));
      return;
    }
    if (method === 'shutdown') {
      shutdown(id);
      return;
    }
    if (method === 'hello') {
      // Answered at once, before the next line is read.
      try {
        answer(id, { result: hello(params) });
      } catch (err) {
        answer(id, errorBody(err.errorClass || TRANSIENT, err.message));
      }
      return;
    }
    const handle = methods[method] && (() => methods[method](params));
    if (!handle) {
      answer(id, errorBody(UNSUPPORTED, `unknown method ${JSON.stringify(method)}`));
      return;
    }
    inFlight++;
    call(id, method, handle).then((body) => {
      inFlight--;
      if (!exiting) answer(id, body);
      if (stdinClosed && inFlight === 0) exit(true);
    });
  };

  let stdinClosed = false;
  // No limit on a line's length: the bad-input fixture sends lines of
  // about 22 MB.
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity, terminal: false });
  rl.on('line', onLine);
  rl.on('close', () => {
    stdinClosed = true;
    if (exiting) return;
    log(`stdin closed; finishing ${inFlight} requests in flight`);
    if (inFlight === 0) exit(true);
  });
}

module.exports = {
  PROTOCOL_VERSION,
  TRANSIENT,
  INVALID_INPUT,
  UNSUPPORTED,
  ProtocolError,
  log,
  field,
  isString,
  isInteger,
  isArray,
  isObject,
  decodeBase64,
  bytesField,
  timeField,
  serve,
};
