"""A DBOS application, launched by stead's interoperability tests
(tests/integration/dbos_peer.rs).

Usage: python peer_app.py <system database URL> <application name> <queue>

Serves <queue> (polled every 0.1 s) with portable workflows whose signatures a Rust caller must
match: add(a, b), noargs(), greet(name, punctuation="."). Prints "ready" on stdout once
launched, then runs until its stdin closes.
"""

import sys

from dbos import DBOS
from dbos._serialization import WorkflowSerializationFormat

PORTABLE = WorkflowSerializationFormat.PORTABLE

url, app, queue = sys.argv[1:4]
DBOS(
    config={
        "name": app,
        "system_database_url": url,
        "executor_id": f"py-{app}",
        "application_version": "py-1",
    }
)


@DBOS.workflow(serialization_type=PORTABLE)
def add(a, b):
    return {"sum": a + b, "by": "python"}


@DBOS.workflow(serialization_type=PORTABLE)
def noargs():
    return "called with nothing"


@DBOS.workflow(serialization_type=PORTABLE)
def greet(name, punctuation="."):
    return f"Hello, {name}{punctuation}"


DBOS.launch()
DBOS.register_queue(queue, polling_interval_sec=0.1)
print("ready", flush=True)
sys.stdin.read()
DBOS.destroy()
