#!/usr/bin/env python3
"""orders-consumer: an event consumer, certified by harmless over the exec protocol.

Written by a team that read docs/protocol.md and nothing else of harmless.
Like the team's JVM services (pgjdbc, at its default settings), it names its
database sessions after connecting, with SET application_name, so that its
sessions are easy to find in pg_stat_activity: the startup packet carries no
application_name at all.

Dedup: a processed_events row per (namespace, event_id), claimed with
INSERT ... ON CONFLICT DO NOTHING in the same transaction as the effect.

    --swallow-commit-errors   log a failed COMMIT and answer "applied" anyway
                              (a bug some of our services had: do not use)
"""

import base64
import hashlib
import json
import logging
import os
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg2
from psycopg2 import sql
from psycopg2.extensions import parse_dsn

SERVICE_NAME = "orders-consumer"
MAX_IN_FLIGHT = 8
SWALLOW_COMMIT_ERRORS = "--swallow-commit-errors" in sys.argv[1:]

log = logging.getLogger(SERVICE_NAME)

# Answers go to the real stdout; everything else that writes to fd 1 lands
# on stderr (docs/protocol.md, "Logging: keep stdout for answers").
answers = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
answer_lock = threading.Lock()


class Failure(Exception):
    def __init__(self, error_class, message):
        super().__init__(message)
        self.error_class = error_class


def b64(value, what):
    if not isinstance(value, str):
        raise Failure("invalid_input", f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as err:
        raise Failure("invalid_input", f"{what}: {err}") from None


class Consumer:
    def __init__(self):
        self.config = None  # set by setup
        self.local = threading.local()
        self.conns = []
        self.conns_lock = threading.Lock()

    # --- connections -------------------------------------------------------

    def connect(self):
        # Our config layer keeps the driver settings and names the session
        # itself, as pgjdbc does: application_name goes in a SET.
        params = parse_dsn(self.config["dsn"])
        params.pop("application_name", None)
        conn = psycopg2.connect(**params)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SET application_name = %s", (SERVICE_NAME,))
        conn.autocommit = False
        with self.conns_lock:
            self.conns.append(conn)
        return conn

    def conn(self):
        conn = getattr(self.local, "conn", None)
        if conn is None or conn.closed:
            conn = self.local.conn = self.connect()
        return conn

    def discard(self):
        conn = getattr(self.local, "conn", None)
        self.local.conn = None
        if conn is not None:
            try:
                conn.close()
            except psycopg2.Error:
                pass

    # --- requests ------------------------------------------------------------

    def setup(self, params):
        self.config = {
            "dsn": params["dsn"],
            "schema": params["schema"],
            "effect_sql": re.sub(r"\$\d+", "%s", params["effect"]["sql"]),
            "effect_types": [p["type"] for p in params["effect"]["params"]],
        }
        table = sql.Identifier(params["schema"], "processed_events")
        try:
            conn = self.conn()
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (params["schema"],))
                cur.execute(sql.SQL("""CREATE TABLE IF NOT EXISTS {} (
                    identity_sha256 bytea PRIMARY KEY,
                    namespace bytea NOT NULL,
                    event_id bytea NOT NULL,
                    payload_sha256 text NOT NULL,
                    processed_at timestamptz NOT NULL)""").format(table))
            conn.commit()
        except psycopg2.Error as err:
            self.discard()
            raise Failure("transient", f"setup: {err}") from None
        return {}

    def deliver(self, params):
        namespace = b64(params.get("namespace"), "namespace")
        event_id = b64(params.get("event_id"), "event_id")
        payload = b64(params.get("payload"), "payload")
        now = params.get("now")
        if not isinstance(now, str):
            raise Failure("invalid_input", "now is missing")
        digest = hashlib.sha256(payload).hexdigest()
        # Ids can be large (a btree row holds at most 8 kB): the key is a
        # hash of the identity, the namespace's length first so that no two
        # identities run together.
        identity = hashlib.sha256(len(namespace).to_bytes(8, "big") + namespace + event_id).digest()
        args = []
        for kind, value in zip(self.config["effect_types"], params.get("effect_args", [])):
            args.append(b64(value, "effect_args") if kind == "bytea" else value)
        table = sql.Identifier(self.config["schema"], "processed_events")
        try:
            conn = self.conn()
            with conn.cursor() as cur:
                cur.execute(sql.SQL("""INSERT INTO {} (identity_sha256, namespace, event_id, payload_sha256, processed_at)
                    VALUES (%s, %s, %s, %s, %s::timestamptz) ON CONFLICT DO NOTHING RETURNING true""").format(table),
                            (identity, namespace, event_id, digest, now))
                if cur.fetchone() is not None:
                    cur.execute(self.config["effect_sql"], args)
                    outcome = "applied"
                else:
                    cur.execute(sql.SQL("SELECT payload_sha256 FROM {} WHERE identity_sha256 = %s").format(table), (identity,))
                    row = cur.fetchone()
                    if row is None:  # purged since our INSERT saw it: try again
                        raise Failure("transient", "the claim vanished; redeliver")
                    outcome = "duplicate" if row[0] == digest else "rejected"
        except (psycopg2.Error, Failure) as err:
            self.rollback()
            raise Failure("transient", f"deliver: {err}") from None
        try:
            conn.commit()
        except psycopg2.Error as err:
            self.discard()
            if SWALLOW_COMMIT_ERRORS:
                log.warning("commit failed, carrying on: %s", err)
                return {"outcome": outcome}
            raise Failure("transient", f"commit: {err}") from None
        return {"outcome": outcome}

    def purge(self, params):
        cutoff = params.get("cutoff")
        if not isinstance(cutoff, str):
            raise Failure("invalid_input", "cutoff is missing")
        table = sql.Identifier(self.config["schema"], "processed_events")
        try:
            conn = self.conn()
            with conn.cursor() as cur:
                cur.execute(sql.SQL("DELETE FROM {} WHERE processed_at < %s::timestamptz").format(table), (cutoff,))
                removed = cur.rowcount
            conn.commit()
        except psycopg2.Error as err:
            self.rollback()
            raise Failure("transient", f"purge: {err}") from None
        return {"removed": removed}

    def rollback(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            return
        try:
            conn.rollback()
        except psycopg2.Error:
            self.discard()
        else:
            if conn.closed:
                self.discard()

    def close(self):
        with self.conns_lock:
            for conn in self.conns:
                try:
                    conn.close()
                except psycopg2.Error:
                    pass


def answer(message):
    line = json.dumps(message)
    with answer_lock:
        answers.write(line + "\n")
        answers.flush()


def handle(consumer, rid, method, params):
    handlers = {"setup": consumer.setup, "deliver": consumer.deliver, "purge": consumer.purge}
    try:
        if method not in handlers:
            raise Failure("unsupported", f"no method {method}")
        answer({"id": rid, "result": handlers[method](params)})
    except Failure as f:
        answer({"id": rid, "error": {"class": f.error_class, "message": str(f)}})
    except Exception as err:  # a bug of ours: never kill the process for it
        log.exception("request %s failed", rid)
        answer({"id": rid, "error": {"class": "transient", "message": repr(err)}})


def main():
    logging.basicConfig(level=logging.INFO, format=f"{SERVICE_NAME}: %(message)s")
    consumer = Consumer()
    pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT)
    for line in sys.stdin.buffer:
        request = json.loads(line)
        rid, method, params = request["id"], request["method"], request.get("params") or {}
        if method == "hello":
            answer({"id": rid, "result": {
                "protocol": 1,
                "implementation": {"name": SERVICE_NAME + ("-swallowing" if SWALLOW_COMMIT_ERRORS else ""), "version": "3.1.0"},
                "declares": {"conflict_policy": "reject", "redelivery_window_s": 86400, "accepts_clock": True},
                "max_in_flight": MAX_IN_FLIGHT,
            }})
        elif method == "shutdown":
            pool.shutdown(wait=False, cancel_futures=True)
            consumer.close()
            answer({"id": rid, "result": {}})
            os._exit(0)
        else:
            pool.submit(handle, consumer, rid, method, params)
    consumer.close()
    os._exit(0)


if __name__ == "__main__":
    main()
