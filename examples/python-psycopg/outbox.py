"""The transactional outbox: each applied event's external effect, sent exactly once.

An external effect (a payment, an email, a webhook) can never commit
atomically with the database. So the claim's transaction does not make it:
it inserts an outbox row next to the marker and the effect, and the row
commits or rolls back with them (impl.py). After the commit, a relay thread
sends each row to the destination and deletes it only once the destination
has acknowledged it with a 2xx.

- Every request for an event carries the same Idempotency-Key, derived from
  the event's identity alone, so a retry after a lost answer, a resend by
  another process, or a resend after a crash is a replay that the
  destination does not process again.
- A failed send (an error status, a refused connection, a timeout) leaves
  the row in place and is retried with exponential backoff.
- A process killed between its commit and its send loses nothing: the row is
  in the database, and the next process's relay sends it when it starts.
- Several processes relay one table at once; ``FOR UPDATE SKIP LOCKED`` hands
  each row to one of them at a time.

Standard library only for HTTP (urllib.request); psycopg2 for the table.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from contextlib import AbstractContextManager
from typing import Callable

from psycopg2 import sql
from psycopg2.extensions import cursor as Cursor

log = logging.getLogger("harmless.outbox")

BATCH = 100  # rows one relay pass locks and sends, in order
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.05, 2.0  # between failed passes
IDLE_POLL_S = 1.0  # a relay with nothing to do looks again this often
DRAIN_POLL_MAX_S = 0.2  # drain looks at the table at least this often
SEND_TIMEOUT_S = 10.0

# No proxy: the destination is on the loopback, and urllib would send even
# that through $http_proxy unless $no_proxy lists it.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def create_table(cur: Cursor, table: sql.Composable) -> None:
    """Create the outbox table unless it exists (it takes no lock when it does)."""
    cur.execute(sql.SQL("""CREATE TABLE IF NOT EXISTS {} (
    seq            bigserial PRIMARY KEY,
    namespace      bytea NOT NULL,
    event_id       bytea NOT NULL,
    payload_digest text  NOT NULL
)""").format(table))


def enqueue(cur: Cursor, table: sql.Composable, namespace: bytes, event_id: bytes, payload_digest: str) -> None:
    """Insert an event's effect in the claim's transaction: it commits with the claim or not at all."""
    cur.execute(sql.SQL("INSERT INTO {} (namespace, event_id, payload_digest) VALUES (%s, %s, %s)").format(table),
                (namespace, event_id, payload_digest))


def idempotency_key(namespace: bytes, event_id: bytes) -> str:
    """A key derived from the identity alone: the same as Go's adapters/external.Key.

    "harmless-v1-" + hex(sha256(uvarint(len(namespace)) + namespace + event_id)).
    The namespace's length is hashed too, so no split of the same bytes into
    namespace and id collides with another.
    """
    n, length = len(namespace), bytearray()
    while n >= 0x80:
        length.append(n & 0x7F | 0x80)
        n >>= 7
    length.append(n)
    return "harmless-v1-" + hashlib.sha256(bytes(length) + namespace + event_id).hexdigest()


def send(destination: str, namespace: bytes, event_id: bytes, payload_digest: str) -> None:
    """POST one effect; return once the destination acknowledged it (2xx), raise otherwise."""
    body = json.dumps({
        # base64: an identity may hold bytes that are not UTF-8.
        "namespace": base64.b64encode(namespace).decode(),
        "id": base64.b64encode(event_id).decode(),
        "payload_digest": payload_digest,
    }).encode()
    request = urllib.request.Request(destination.rstrip("/") + "/effects", data=body, method="POST", headers={
        "Content-Type": "application/json",
        "Idempotency-Key": idempotency_key(namespace, event_id),
    })
    # open raises HTTPError for 4xx and 5xx answers, URLError or another
    # OSError when the connection is refused, dropped or times out, and
    # http.client.HTTPException for a garbled answer.
    with _opener.open(request, timeout=SEND_TIMEOUT_S) as response:
        response.read()


Transaction = Callable[[str], AbstractContextManager[Cursor]]


class Relay:
    """A thread that sends the outbox's rows to the destination, after commit."""

    def __init__(self, transaction: Transaction, table: sql.Composable, destination: str) -> None:
        self._transaction = transaction  # a cursor in a transaction, on this thread's connection
        self._table = table
        self._destination = destination
        self._wake = threading.Event()
        self._stopped = threading.Event()
        # The first pass, at once, sends what a killed process left behind.
        threading.Thread(target=self._run, name="relay", daemon=True).start()

    def wake(self) -> None:
        """Send now: a claim just committed a row."""
        self._wake.set()

    def stop(self) -> None:
        """Stop without draining: what is left stays in the table for the next process."""
        self._stopped.set()
        self._wake.set()

    def drain(self) -> None:
        """Return once every row committed before the call has been acknowledged and deleted.

        Rows another process's relay is sending count too: they are deleted
        only when that send is acknowledged.
        """
        with self._transaction("drain") as cur:
            cur.execute(sql.SQL("SELECT max(seq) FROM {}").format(self._table))
            last = cur.fetchone()[0]
        pause = BACKOFF_MIN_S
        while last is not None and not self._stopped.is_set():
            self.wake()
            with self._transaction("drain") as cur:
                cur.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE seq <= %s)").format(self._table), (last,))
                if not cur.fetchone()[0]:
                    return
            time.sleep(pause)
            pause = min(pause * 2, DRAIN_POLL_MAX_S)

    def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stopped.is_set():
            self._wake.clear()
            try:
                done = self._pass()
            except Exception as err:  # a lost connection, a server restart: retry
                log.warning("relay: %s: %s", type(err).__name__, err)
                done = False
            if done:
                backoff, pause = BACKOFF_MIN_S, IDLE_POLL_S
            else:
                backoff, pause = min(backoff * 2, BACKOFF_MAX_S), backoff
            self._wake.wait(pause)

    def _pass(self) -> bool:
        """Send pending rows in order until one fails; report whether none is left to send."""
        with self._transaction("relay") as cur:
            cur.execute(sql.SQL("SELECT seq, namespace, event_id, payload_digest FROM {} "
                                "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED").format(self._table), (BATCH,))
            rows = cur.fetchall()
            sent = []
            for seq, namespace, event_id, digest in rows:
                try:
                    send(self._destination, bytes(namespace), bytes(event_id), digest)
                except (OSError, http.client.HTTPException) as err:  # HTTPError and URLError are OSErrors
                    log.info("relay: effect %d not acknowledged, will retry: %s", seq, err)
                    break
                sent.append(seq)
            # Only acknowledged rows go. A crash before this commit leaves
            # them to be sent again, with the same key: a replay.
            if sent:
                cur.execute(sql.SQL("DELETE FROM {} WHERE seq = ANY(%s)").format(self._table), (sent,))
            cur.connection.commit()
        return len(sent) == len(rows) and len(rows) < BATCH
