"""DELIBERATELY BROKEN: impl.py with a check-then-insert claim. Do not copy.

harmless must fail it on the concurrent-delivery fixture:

    harmless certify --exec "python3 examples/python-psycopg/broken_check_then_insert.py"

It is the most common hand-written deduplication: "if we have not seen this
event, record it and process it", a SELECT then an INSERT in one transaction,
on a processed-events table without a unique key on the event's identity.
Everything else is impl.py's: the protocol, the declarations, the effect in
the same transaction, the payload digest, the purge.

It passes every sequential test. Under READ COMMITTED, PostgreSQL's default,
a transaction does not see another's uncommitted marker, so two instances
handed the same event at once both find nothing, both insert a marker and
both apply the effect, and each answers "applied".
"""

from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import impl  # noqa: E402  (restarts under the system Python if psycopg2 is missing)
from psycopg2 import sql  # noqa: E402


class CheckThenInsert(impl.Implementation):
    """impl.Implementation with the bug: no unique key, and a claim in two steps."""

    declarations = dataclasses.replace(impl.DECLARATIONS, name="python-psycopg-broken-check-then-insert")

    # The bug, part one: nothing in the table stops a second marker for an
    # identity.
    marker_key = sql.SQL("")

    def claim(self, cur: impl.Cursor, table: sql.Composable, d: impl.Delivery) -> bool:
        # The bug, part two: between this SELECT and the INSERT, a concurrent
        # delivery of the same event can do the same SELECT and find nothing.
        if impl.stored_digest(cur, table, d) is not None:
            return False
        cur.execute(impl.insert_marker(table), d.marker_args())
        return True


if __name__ == "__main__":
    impl.main(CheckThenInsert())
