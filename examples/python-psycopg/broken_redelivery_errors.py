"""DELIBERATELY BROKEN: impl.py with a plain INSERT of the marker. Do not copy.

harmless must fail it: every redelivery of an applied event is answered with
an error, never acknowledged.

    harmless certify --exec "python3 examples/python-psycopg/broken_redelivery_errors.py"

It is the inbox written as "insert the marker; the unique key stops a second
copy": the INSERT has no ON CONFLICT, so a second copy of an event raises a
unique violation (SQLSTATE 23505), which rolls the transaction back and
comes back to the broker as an error. Nothing is applied twice, and the
first delivery is acknowledged; but no redelivery ever is, so the broker
hands the event out again and again until it gives up on it (a dead-letter
queue, in production, full of events that were handled).

harmless's own benchmark (ci/bench-certify.sh) times it: an implementation
that errors on every redelivery must be judged in bounded time.
"""

from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import impl  # noqa: E402  (restarts under the system Python if psycopg2 is missing)
from psycopg2 import sql  # noqa: E402


class RedeliveryErrors(impl.Implementation):
    """impl.Implementation with the bug: the claim is a plain INSERT."""

    declarations = dataclasses.replace(impl.DECLARATIONS, name="python-psycopg-broken-redelivery-errors")

    def claim(self, cur: impl.Cursor, table: sql.Composable, d: impl.Delivery) -> bool:
        # The bug: a second copy's INSERT raises a unique violation, which
        # becomes the delivery's error, instead of being found claimed and
        # answered Duplicate.
        cur.execute(impl.insert_marker(table), d.marker_args())
        return True


if __name__ == "__main__":
    impl.main(RedeliveryErrors())
