"""A DBOS application with DBOS's default settings (pickle everywhere), launched by stead's
interoperability tests (tests/integration/dbos_interop/py_defaults.rs).

Usage: python default_app.py <system database URL> <application name> <queue>

Serves <queue> (polled every 0.1 s) with produce(), which records a step, sets event "ev" (and
event "bad" to an instance of a class of its own), writes stream "st" (then closes it), waits up to 60 s for a message on topic "in" and returns
what it got beside values of every type stead reads; and fail(reason), which raises
ValueError(reason). Prints "ready" on stdout once launched, then runs until its stdin closes.
"""

import sys
import uuid
from datetime import date, datetime, timezone
from decimal import Decimal

from dbos import DBOS

url, app, queue = sys.argv[1:4]
DBOS(config={"name": app, "system_database_url": url, "executor_id": f"py-{app}"})

WHEN = datetime(2025, 6, 15, 10, 30, 0, 123456, tzinfo=timezone.utc)


class Point:
    """A class instance: stead refuses to read it."""

    def __init__(self, x, y):
        self.x, self.y = x, y


@DBOS.step()
def stepped():
    return {"at": WHEN, "big": 2**70, "day": date(2025, 6, 15)}


@DBOS.workflow()
def produce():
    s = stepped()
    DBOS.set_event(
        "ev",
        {
            "at": WHEN,
            "price": Decimal("12.50"),
            "id": uuid.UUID("6f1e7c1a-3b5d-4c2e-9a8b-0123456789ab"),
            "tags": {"x"},
            "raw": b"\x00\xff",
        },
    )
    DBOS.set_event("bad", Point(1, 2))
    DBOS.write_stream("st", {"n": 1, "at": WHEN})
    DBOS.write_stream("st", (2, frozenset([3])))
    DBOS.close_stream("st")
    got = DBOS.recv("in", timeout_seconds=60)
    return {"stepped": s, "got": got, "pair": (1, "a"), "keys": {1: "one"}, "none": None}


@DBOS.workflow()
def fail(reason):
    raise ValueError(reason)


DBOS.launch()
DBOS.register_queue(queue, polling_interval_sec=0.1)
print("ready", flush=True)
sys.stdin.read()
DBOS.destroy()
