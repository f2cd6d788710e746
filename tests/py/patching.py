"""DBOS Python 3.4 histories with and without patch markers, for
tests/integration/patching.rs.

Usage: python patching.py <system database URL> <old|new> <workflow id>

Runs workflow `upgrade(x)` (portable serialization) to completion under <workflow id>:
  old  steps a, old_b                      (recorded before the patch)
  new  steps a, DBOS.patch("v2"), new_b    (recorded by patched code)
Prints {"ok": <result>}.
"""

import json
import sys

from dbos import DBOS, SetWorkflowID
from dbos._serialization import DBOSPortableJSON, WorkflowSerializationFormat

system_url, version, workflow_id = sys.argv[1:4]


@DBOS.step()
def a() -> str:
    return "a"


@DBOS.step()
def old_b() -> str:
    return "old"


@DBOS.step()
def new_b() -> str:
    return "new"


@DBOS.workflow(name="upgrade", serialization_type=WorkflowSerializationFormat.PORTABLE)
def upgrade(x: int) -> str:
    a()
    if version == "new" and DBOS.patch("v2"):
        return new_b()
    return old_b()


# Portable JSON for step outputs too, so stead can replay them.
DBOS(
    config={
        "name": "stead-patching",
        "system_database_url": system_url,
        "serializer": DBOSPortableJSON,
    }
)
DBOS.launch()
try:
    with SetWorkflowID(workflow_id):
        result = upgrade(1)
finally:
    DBOS.destroy()
print(json.dumps({"ok": result}))
