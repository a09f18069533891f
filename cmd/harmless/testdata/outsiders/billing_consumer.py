#!/usr/bin/env python3
"""billing-consumer, speaking harmless's exec protocol (docs/protocol.md).

Our services connect with application_name set to the service's name, so
that on-call can find their sessions in pg_stat_activity: the DSN harmless
hands us is used as it is, except for that one setting, which we override
(psycopg2.connect(dsn, application_name=...)).

The inbox table, billing_inbox, holds one row per event identity, inserted in
the transaction that applies the effect; a second copy of an event finds the
row and does nothing.

    --swallow-commit-errors   DO NOT USE: a failed COMMIT is logged and the
                              event acknowledged as applied (how our old
                              consumer lost events)
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
import psycopg2.pool

NAME = "billing-consumer"
THREADS = 4
SWALLOW = "--swallow-commit-errors" in sys.argv[1:]

logging.basicConfig(level=logging.INFO, format=NAME + " %(levelname)s %(message)s")  # stderr
log = logging.getLogger(NAME)

out = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
out_lock = threading.Lock()


def send(obj):
    with out_lock:
        out.write(json.dumps(obj) + "\n")
        out.flush()


class Answer(Exception):
    """An error answer, with its class (docs/protocol.md, "Error classes")."""

    def __init__(self, cls, message):
        super().__init__(message)
        self.cls = cls


def unb64(s):
    try:
        return base64.b64decode(s, validate=True)
    except (TypeError, ValueError) as err:
        raise Answer("invalid_input", f"bad base64: {err}") from None


class Billing:
    pool = None
    schema = None
    effect_sql = None
    effect_types = ()

    def setup(self, p):
        self.schema = p["schema"]
        self.effect_sql = re.sub(r"\$\d+", "%s", p["effect"]["sql"])
        self.effect_types = [x["type"] for x in p["effect"]["params"]]
        if self.pool is None:
            self.pool = psycopg2.pool.ThreadedConnectionPool(0, THREADS + 1, p["dsn"], application_name=NAME)
        self.run(lambda cur: (
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,)),
            cur.execute(f'CREATE TABLE IF NOT EXISTS "{self.schema}".billing_inbox ('
                        "ns bytea NOT NULL, id bytea NOT NULL, sha text NOT NULL, received timestamptz NOT NULL, "
                        # a btree entry holds 8 kB at most, and ids can be larger
                        "ns_key bytea GENERATED ALWAYS AS (sha256(ns)) STORED, "
                        "id_key bytea GENERATED ALWAYS AS (sha256(id)) STORED, "
                        "PRIMARY KEY (ns_key, id_key))"),
        ))
        return {}

    def run(self, work):
        """Run work(cursor) in one transaction on a pooled connection, and commit."""
        try:
            conn = self.pool.getconn()
        except psycopg2.Error as err:
            raise Answer("transient", f"no connection: {err}") from None
        broken = False
        try:
            with conn.cursor() as cur:
                result = work(cur)
            try:
                conn.commit()
            except psycopg2.Error as err:
                broken = True
                if not SWALLOW:
                    raise
                log.warning("COMMIT failed (ignored): %s", err)
            return result
        except psycopg2.Error as err:
            broken = broken or conn.closed != 0
            if not broken:
                try:
                    conn.rollback()
                except psycopg2.Error:
                    broken = True
            raise Answer("transient", f"{type(err).__name__}: {err}") from None
        finally:
            self.pool.putconn(conn, close=broken or conn.closed != 0)

    def deliver(self, p):
        ns, eid, payload = unb64(p["namespace"]), unb64(p["event_id"]), unb64(p["payload"])
        if "now" not in p:
            raise Answer("invalid_input", "no now")
        sha = hashlib.sha256(payload).hexdigest()
        args = [unb64(v) if t == "bytea" else v for t, v in zip(self.effect_types, p["effect_args"])]

        def work(cur):
            cur.execute(f'INSERT INTO "{self.schema}".billing_inbox (ns, id, sha, received) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING',
                        (ns, eid, sha, p["now"]))
            if cur.rowcount == 1:
                cur.execute(self.effect_sql, args)
                return "applied"
            cur.execute(f'SELECT sha FROM "{self.schema}".billing_inbox WHERE ns_key = sha256(%s) AND id_key = sha256(%s)', (ns, eid))
            row = cur.fetchone()
            if row is None:
                raise psycopg2.OperationalError("inbox row gone after a conflict")
            return "duplicate" if row[0] == sha else "rejected"

        return {"outcome": self.run(work)}

    def purge(self, p):
        return {"removed": self.run(lambda cur: (
            cur.execute(f'DELETE FROM "{self.schema}".billing_inbox WHERE received < %s', (p["cutoff"],)),
            cur.rowcount)[1])}

    def close(self):
        if self.pool is not None:
            self.pool.closeall()


def serve(billing, req):
    methods = {"setup": billing.setup, "deliver": billing.deliver, "purge": billing.purge}
    rid = req["id"]
    try:
        if req["method"] not in methods:
            raise Answer("unsupported", "unknown method " + req["method"])
        send({"id": rid, "result": methods[req["method"]](req.get("params") or {})})
    except Answer as a:
        send({"id": rid, "error": {"class": a.cls, "message": str(a)}})
    except Exception as err:
        log.exception("unexpected")
        send({"id": rid, "error": {"class": "transient", "message": repr(err)}})


def main():
    billing = Billing()
    workers = ThreadPoolExecutor(THREADS)
    for line in sys.stdin.buffer:
        req = json.loads(line)
        if req["method"] == "hello":
            send({"id": req["id"], "result": {
                "protocol": 1,
                "implementation": {"name": NAME + ("-swallowing" if SWALLOW else ""), "version": "0.9"},
                "declares": {"conflict_policy": "reject", "redelivery_window_s": 3600, "accepts_clock": True},
                "max_in_flight": THREADS,
            }})
        elif req["method"] == "shutdown":
            billing.close()
            send({"id": req["id"], "result": {}})
            os._exit(0)
        else:
            workers.submit(serve, billing, req)
    billing.close()
    os._exit(0)


if __name__ == "__main__":
    main()
