"""Duplicate-harmless event processing on PostgreSQL with psycopg2.

This is harmless's reference pattern (adapters/reference) written in Python,
as an implementation harmless certifies over its exec protocol:

    harmless certify --exec "python3 examples/python-psycopg/impl.py"

Every event has a stable identity: its namespace and id, both bytes. A table
of processed events has a unique key on (namespace, event_id). To process a
delivery, one transaction:

1. claims the identity:
   INSERT INTO processed_events (...) VALUES (...)
   ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true;
2. runs the effect only if a row came back, in the same transaction;
3. commits, so marker and effect are durable together or not at all.

A concurrent delivery of the same identity blocks on the unique index until
the claimant's transaction ends: it then finds the marker (duplicate) or, if
the claimant rolled back, claims the event itself. A failure anywhere before
COMMIT rolls the marker back with the effect, so the event stays eligible for
redelivery.

The marker stores the SHA-256 digest of the payload: a delivery whose
identity is already claimed is a duplicate when the digests are equal, and is
rejected when they differ (conflict policy "reject").

Markers are kept for the redelivery window and purged after it: a purge
removes the markers claimed before its cutoff.

The event's external effect (the call to the destination harmless gives in
setup) goes through a transactional outbox (outbox.py): step 2 also inserts
an outbox row, and after the commit a relay thread sends it with an
idempotency key derived from the identity, retrying until the destination
acknowledges it. Without a destination there is no external effect to make.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import os
import re
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterator, NoReturn

# Found next to this file even when Python does not put the script's
# directory on sys.path (python -P, PYTHONSAFEPATH).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harmless_protocol as hp  # noqa: E402

try:
    import psycopg2
    from psycopg2 import sql
    from psycopg2.extensions import connection as Connection, cursor as Cursor
except ImportError:
    hp.reexec_with_system_python("psycopg2", "python3-psycopg2")

import outbox  # noqa: E402

log = logging.getLogger("harmless.impl")

DECLARATIONS = hp.Declarations(
    name="python-psycopg",
    version="1.0.0",
    conflict_policy="reject",
    redelivery_window_s=86400,
    accepts_clock=True,
    max_in_flight=16,
    external_effects="outbox",
)

# A longer identity would not fit the unique index (a B-tree entry holds about
# 2.7 kB) and would fail at the database on every redelivery, for ever.
MAX_IDENTITY_BYTES = 1024

APPLIED, DUPLICATE, REJECTED = "applied", "duplicate", "rejected"


@dataclass(frozen=True)
class Delivery:
    """One deliver request, decoded."""

    namespace: bytes
    event_id: bytes
    digest: bytes  # SHA-256 of the payload, stored in the marker
    now: datetime  # the harness's clock: when the marker is claimed
    effect_args: list[Any]

    @classmethod
    def parse(cls, params: hp.Params) -> Delivery:
        payload = hp.bytes_field(params, "payload")
        return cls(
            namespace=hp.bytes_field(params, "namespace"),
            event_id=hp.bytes_field(params, "event_id"),
            digest=hashlib.sha256(payload).digest(),
            now=hp.time_field(params, "now"),
            effect_args=hp.field(params, "effect_args", list),
        )

    def __str__(self) -> str:
        return f"{_show(self.namespace)}/{_show(self.event_id)}"

    def validate(self) -> None:
        """Refuse, as invalid input, identities the marker cannot hold faithfully.

        The same rules as the Go reference (adapters/internal/kit.Validate), so
        that both answer the bad-input fixture alike: retrying such an event
        could never succeed, so it is refused instead of failing transiently.
        """
        if len(self.namespace) > MAX_IDENTITY_BYTES or len(self.event_id) > MAX_IDENTITY_BYTES:
            problem = f"namespace and id may have at most {MAX_IDENTITY_BYTES} bytes each"
        elif not self.event_id:
            problem = "empty id"
        elif not (_is_utf8(self.namespace) and _is_utf8(self.event_id)):
            problem = "identity is not valid UTF-8"
        elif b"\0" in self.namespace + self.event_id:
            problem = "identity contains a NUL byte"
        else:
            return
        raise hp.ProtocolError(hp.INVALID_INPUT, f"event {self}: {problem}")

    def marker_args(self) -> tuple[Any, ...]:
        """The arguments of the marker INSERT, in column order."""
        return psycopg2.Binary(self.namespace), psycopg2.Binary(self.event_id), psycopg2.Binary(self.digest), self.now


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _show(b: bytes, limit: int = 64) -> str:
    """b for messages: readable, short, with invalid UTF-8 and control bytes escaped."""
    text = b[:limit].decode("utf-8", "backslashreplace")
    text = re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", text)
    return text + f"...({len(b)} bytes)" if len(b) > limit else text


# How deliver's effect_args are decoded, by effect param type.
_ARG_DECODERS: dict[str, Callable[[Any, str], Any]] = {
    "bytea": lambda v, what: psycopg2.Binary(hp.decode_base64(v, what)),
    "text": lambda v, what: _expect(v, str, what),
    "int4": lambda v, what: _expect(v, int, what),
}


def _expect(value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise hp.ProtocolError(hp.INVALID_INPUT, f"{what} must be a {kind.__name__}, got {value!r:.80}")
    return value


@dataclass(frozen=True)
class Effect:
    """The harness's effect: a statement to run when an event is claimed."""

    statement: str  # with psycopg's placeholders
    types: list[str]

    @classmethod
    def parse(cls, params: hp.Params) -> Effect:
        statement = hp.field(params, "sql", str)
        types = [hp.field(_expect(p, dict, f"effect.params[{i}]"), "type", str)
                 for i, p in enumerate(hp.field(params, "params", list))]
        unknown = sorted(set(types) - _ARG_DECODERS.keys())
        if unknown:
            raise hp.ProtocolError(hp.UNSUPPORTED, f"effect param types {unknown} are not supported")
        # $N -> %s, as docs/protocol.md suggests: the statement has no other $,
        # % or ?, and its placeholders come in order, $1 to $N.
        return cls(statement=re.sub(r"\$\d+", "%s", statement), types=types)

    def args(self, values: list[Any]) -> list[Any]:
        """deliver's effect_args, decoded for psycopg2."""
        if len(values) != len(self.types):
            raise hp.ProtocolError(hp.INVALID_INPUT, f"effect_args has {len(values)} values for {len(self.types)} params")
        return [_ARG_DECODERS[t](v, f"effect_args[{i}]") for i, (t, v) in enumerate(zip(self.types, values))]


class Connections:
    """One connection per thread, reopened after it is lost.

    A thread holds its connection from one request to the next. A connection
    that failed (the server restarted, a proxy cut it, it was terminated) is
    discarded, so the thread's next request connects again: the process
    recovers by itself, as a long-running service must.
    """

    def __init__(self, dsn: str) -> None:
        # The DSN is used unchanged: its hosts are this instance's listeners
        # on harmless's wire proxy, which is how its faults reach us.
        self._dsn = dsn
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[Connection] = set()

    @contextmanager
    def transaction(self, what: str) -> Iterator[Cursor]:
        """A cursor in a transaction that is rolled back unless the body commits.

        Rollback after commit is a no-op; on every other path, including an
        error in the body, it undoes everything the body wrote. A database
        error becomes a transient error answer about ``what``.
        """
        conn = None
        try:
            conn = self._get()
            with conn.cursor() as cur:
                yield cur
            conn.rollback()
        except Exception as err:
            if conn is not None:
                self._abort(conn, err)
            if isinstance(err, psycopg2.Error):
                raise hp.ProtocolError(hp.TRANSIENT, f"{what}: {type(err).__name__}: {' '.join(str(err).split())}") from err
            raise

    def close(self) -> None:
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            conn.close()

    def _get(self) -> Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.closed:
            self._discard(conn)
            conn = None
        if conn is None:
            conn = psycopg2.connect(self._dsn)
            self._local.conn = conn
            with self._lock:
                self._open.add(conn)
        return conn

    def _abort(self, conn: Connection, err: Exception) -> None:
        """Roll back after err, or discard conn when it cannot be trusted.

        An OperationalError or InterfaceError may mean the connection is gone
        (the server crashed, a proxy cut it, it was terminated): reconnecting
        costs less than finding out.
        """
        if not isinstance(err, (psycopg2.OperationalError, psycopg2.InterfaceError)) and not conn.closed:
            try:
                conn.rollback()
                return
            except psycopg2.Error:
                pass
        log.info("discarding a connection after %s; the next request reconnects", type(err).__name__)
        self._discard(conn)

    def _discard(self, conn: Connection) -> None:
        self._local.conn = None
        with self._lock:
            self._open.discard(conn)
        conn.close()


@dataclass(frozen=True)
class Setup:
    """What setup configured: where the markers live and what the effect is."""

    connections: Connections
    table: sql.Composable  # the schema-qualified marker table
    effect: Effect
    outbox: sql.Composable  # the schema-qualified outbox table
    relay: outbox.Relay | None  # None when harmless gave no destination


class Implementation:
    """The exec protocol's handler: claims events and applies their effects once."""

    declarations = DECLARATIONS

    # The unique key is what makes the claim atomic: ON CONFLICT relies on
    # it, and a concurrent claim of the same identity waits on it.
    marker_key = sql.SQL(",\n    PRIMARY KEY (namespace, event_id)")

    def __init__(self) -> None:
        self._setup: Setup | None = None

    def setup(self, params: hp.Params) -> hp.Result:
        schema = hp.field(params, "schema", str)
        destination = params.get("destination") or ""  # absent when the play has none
        connections = Connections(hp.field(params, "dsn", str))
        setup = Setup(
            connections=connections,
            table=sql.Identifier(schema, "processed_events"),
            effect=Effect.parse(hp.field(params, "effect", dict)),
            outbox=sql.Identifier(schema, "outbox"),
            relay=None,
        )
        with setup.connections.transaction("setup") as cur:
            # Several processes may set up one schema at once, and two
            # concurrent CREATE ... IF NOT EXISTS of one table can both try to
            # create it (one then fails on the catalog's unique index); the
            # lock makes them take turns.
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
            # Other processes may hold deliveries in flight on the table.
            # CREATE TABLE IF NOT EXISTS takes no lock on a table that exists,
            # but CREATE INDEX IF NOT EXISTS takes a SHARE lock even when the
            # index exists, and would wait for every one of them: look the
            # index up instead, and create it only when it is missing.
            cur.execute(sql.SQL("""CREATE TABLE IF NOT EXISTS {} (
    namespace      bytea       NOT NULL,
    event_id       bytea       NOT NULL,
    payload_digest bytea       NOT NULL,
    processed_at   timestamptz NOT NULL{}
)""").format(setup.table, self.marker_key))
            # Purge finds expired markers by processed_at.
            cur.execute("SELECT to_regclass(%s) IS NULL",
                        (sql.Identifier(schema, "processed_events_processed_at").as_string(cur),))
            if cur.fetchone()[0]:
                cur.execute(sql.SQL("CREATE INDEX processed_events_processed_at ON {} (processed_at)")
                            .format(setup.table))
            outbox.create_table(cur, setup.outbox)
            cur.connection.commit()
        if destination:
            # Its first pass sends what a process killed after its commit left.
            setup = dataclasses.replace(setup, relay=outbox.Relay(connections.transaction, setup.outbox, destination))
        self._setup = setup
        log.info("set up in schema %s", schema)
        return {}

    def deliver(self, params: hp.Params) -> hp.Result:
        s = self._configured()
        d = Delivery.parse(params)
        d.validate()
        effect_args = s.effect.args(d.effect_args)
        with s.connections.transaction(f"deliver {d}") as cur:
            if not self.claim(cur, s.table, d):
                return {"outcome": self._compare(cur, s.table, d)}
            cur.execute(s.effect.statement, effect_args)
            if s.relay is not None:
                # The external effect commits with the claim, as a row the
                # relay sends: never from inside the transaction.
                outbox.enqueue(cur, s.outbox, d.namespace, d.event_id, d.digest.hex())
            cur.connection.commit()
        if s.relay is not None:
            s.relay.wake()
        return {"outcome": APPLIED}

    def claim(self, cur: Cursor, table: sql.Composable, d: Delivery) -> bool:
        """Insert d's marker unless its identity is claimed; report whether it was.

        One statement decides, atomically under the unique key: a SELECT
        followed by an INSERT would let two concurrent deliveries both find
        nothing and both apply the effect.
        """
        cur.execute(insert_marker(table) + sql.SQL(" ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true"),
                    d.marker_args())
        return cur.fetchone() is not None

    def _compare(self, cur: Cursor, table: sql.Composable, d: Delivery) -> str:
        """Classify a delivery whose identity is already claimed, by payload digest."""
        stored = stored_digest(cur, table, d)
        if stored is None:
            # Purged between the claim and this read: let harmless redeliver.
            raise hp.ProtocolError(hp.TRANSIENT, f"deliver {d}: the marker vanished during the conflict check; retry")
        return DUPLICATE if stored == d.digest else REJECTED

    def purge(self, params: hp.Params) -> hp.Result:
        """Remove the markers claimed before the cutoff; those at or after it stay."""
        s = self._configured()
        cutoff = hp.time_field(params, "cutoff")
        with s.connections.transaction(f"purge before {cutoff.isoformat()}") as cur:
            cur.execute(sql.SQL("DELETE FROM {} WHERE processed_at < %s").format(s.table), (cutoff,))
            removed = cur.rowcount
            cur.connection.commit()
        return {"removed": removed}

    def drain(self, params: hp.Params) -> hp.Result:
        """Answer once every external effect committed before now has been acknowledged."""
        s = self._configured()
        if s.relay is not None:
            s.relay.drain()
        return {}

    def close(self) -> None:
        # The relay stops without draining: what it has not sent stays in
        # the outbox for the next process.
        if self._setup is not None:
            if self._setup.relay is not None:
                self._setup.relay.stop()
            self._setup.connections.close()

    def _configured(self) -> Setup:
        if self._setup is None:
            raise hp.ProtocolError(hp.TRANSIENT, "setup has not completed")
        return self._setup


def insert_marker(table: sql.Composable) -> sql.Composable:
    """The INSERT of a marker; Delivery.marker_args are its arguments."""
    return sql.SQL("INSERT INTO {} (namespace, event_id, payload_digest, processed_at) VALUES (%s, %s, %s, %s)").format(table)


def stored_digest(cur: Cursor, table: sql.Composable, d: Delivery) -> bytes | None:
    """The payload digest in d's marker, or None when there is no marker."""
    cur.execute(sql.SQL("SELECT payload_digest FROM {} WHERE namespace = %s AND event_id = %s").format(table),
                (psycopg2.Binary(d.namespace), psycopg2.Binary(d.event_id)))
    row = cur.fetchone()
    return None if row is None else bytes(row[0])


def main(implementation: Implementation) -> NoReturn:
    """Serve implementation, with the max_in_flight the command line asks for."""
    parser = argparse.ArgumentParser(description="An implementation harmless certifies over its exec protocol.")
    parser.add_argument(
        "--max-in-flight", type=int, default=implementation.declarations.max_in_flight, metavar="N",
        help="how many requests one process handles at once, 1 to 1024, as declared in hello "
             "(default %(default)s); 1 handles each request before the next, and harmless "
             "starts more processes for concurrency")
    args = parser.parse_args()
    if not 1 <= args.max_in_flight <= 1024:
        parser.error(f"--max-in-flight must be between 1 and 1024, not {args.max_in_flight}")
    implementation.declarations = dataclasses.replace(implementation.declarations, max_in_flight=args.max_in_flight)
    hp.serve(implementation)


if __name__ == "__main__":
    main(Implementation())
