"""The DBOS Python client, driven by stead's interoperability tests
(tests/integration/dbos_interop.rs).

Usage: python client.py <system database URL> <application name> <command> <JSON argument>

Prints one JSON object on stdout: {"ok": <value>} or {"error": {"type": ..., "message": ...}}
(with "name", "code" and "data" when the error is a portable one).
"portable": false leaves the serialization to the client's default (pickle, py_pickle).
Arguments and messages may hold tagged values (`typed`): {"$py": "datetime", "iso": ...},
"date" (iso), "decimal" (text), "uuid" (text), "bytes" (hex), "int" (text), "float" (text, e.g.
"nan"), "tuple"/"set"/"frozenset" (items), "intkeys" (pairs: a dict with int keys), "point" (x, y:
an instance of this script's class Point) and "system" (cmd: a value whose pickle calls
os.system(cmd) when unpickled).
Commands:
  enqueue     {"workflow", "queue", "id", "args", "kwargs", "portable", "wait", "attributes"}
              enqueues with DBOSClient.enqueue (portable JSON unless "portable" is false); with
              "wait", returns the handle's get_result(), else the workflow id
  list        {"attributes"}: ids of DBOSClient.list_workflows(attributes=...), oldest first
  update_attributes {"id", "attributes", "merge"}: DBOSClient.update_workflow_attributes
  result      {"id"}: the workflow's get_result()
  send        {"to", "message", "topic", "portable", "key"}: DBOSClient.send ("key": its
              idempotency key)
  get_event   {"id", "key", "timeout"}: DBOSClient.get_event
  cancel      {"id"}: DBOSClient.cancel_workflow
  list        {filters of DBOSClient.list_workflows}: the ids listed
"""

import datetime
import decimal
import json
import os
import sys
import uuid

from dbos import DBOSClient, EnqueueOptions
from dbos._serialization import WorkflowSerializationFormat


class Point:
    """A class instance, which stead must refuse to read."""

    def __init__(self, x, y):
        self.x, self.y = x, y


class System:
    """A value whose pickle runs a command when unpickled: stead must never run it."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def typed(v):
    if isinstance(v, list):
        return [typed(x) for x in v]
    if not isinstance(v, dict):
        return v
    tag = v.get("$py")
    if tag is None:
        return {k: typed(x) for k, x in v.items()}
    if tag == "datetime":
        return datetime.datetime.fromisoformat(v["iso"])
    if tag == "date":
        return datetime.date.fromisoformat(v["iso"])
    if tag == "decimal":
        return decimal.Decimal(v["text"])
    if tag == "uuid":
        return uuid.UUID(v["text"])
    if tag == "bytes":
        return bytes.fromhex(v["hex"])
    if tag == "int":
        return int(v["text"])
    if tag == "float":
        return float(v["text"])
    if tag == "tuple":
        return tuple(typed(v["items"]))
    if tag == "set":
        return set(typed(v["items"]))
    if tag == "frozenset":
        return frozenset(typed(v["items"]))
    if tag == "intkeys":
        return {int(k): typed(x) for k, x in v["pairs"]}
    if tag == "point":
        return Point(v["x"], v["y"])
    if tag == "system":
        return System(v["cmd"])
    raise ValueError(f"unknown tag {tag}")


def serialization(args):
    """Portable JSON unless "portable" is false: then the client's default (pickle)."""
    if args.get("portable", True):
        return WorkflowSerializationFormat.PORTABLE
    return None


def enqueue(client, args):
    options: EnqueueOptions = {
        "workflow_name": args["workflow"],
        "queue_name": args["queue"],
    }
    if serialization(args) is not None:
        options["serialization_type"] = serialization(args)
    if "id" in args:
        options["workflow_id"] = args["id"]
    if "attributes" in args:
        options["attributes"] = args["attributes"]
    handle = client.enqueue(
        options, *typed(args.get("args", [])), **typed(args.get("kwargs", {}))
    )
    if args.get("wait"):
        return handle.get_result(polling_interval_sec=0.1)
    return handle.get_workflow_id()


def result(client, args):
    return client.retrieve_workflow(args["id"]).get_result(polling_interval_sec=0.1)


def send(client, args):
    client.send(
        args["to"],
        typed(args["message"]),
        args.get("topic"),
        args.get("key"),
        serialization_type=serialization(args),
    )
    return None


def cancel(client, args):
    client.cancel_workflow(args["id"])
    return None


def list_ids(client, args):
    return [w.workflow_id for w in client.list_workflows(**args)]


def statuses(client, args):
    return [
        {"id": w.workflow_id, "status": w.status, "queue": w.queue_name}
        for w in client.list_workflows(**args)
    ]


def get_event(client, args):
    return client.get_event(args["id"], args["key"], args.get("timeout", 10))


def update_attributes(client, args):
    client.update_workflow_attributes(
        args["id"], args.get("attributes"), merge=args.get("merge", False)
    )
    return None


COMMANDS = {
    "enqueue": enqueue,
    "result": result,
    "send": send,
    "get_event": get_event,
    "cancel": cancel,
    "list": list_ids,
    "statuses": statuses,
    "update_attributes": update_attributes,
}


def main():
    url, app, command, arg = sys.argv[1:5]
    client = DBOSClient(system_database_url=url, application_name=app)
    try:
        out = {"ok": COMMANDS[command](client, json.loads(arg))}
    except Exception as e:  # reported to the test, which asserts on it
        out = {"error": {"type": type(e).__name__, "message": str(e)}}
        # A portable error (PortableWorkflowError) also carries its name, code and data.
        for field in ("name", "code", "data"):
            if hasattr(e, field):
                out["error"][field] = getattr(e, field)
    finally:
        client.destroy()
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
