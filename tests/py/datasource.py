"""DBOS Python 3.4 datasources on stead's application database, driven by
tests/integration/transactions.rs.

Usage: python datasource.py <system database URL> <application database URL> <command> <id>

Prints one JSON object on stdout: {"ok": <value>}.
Commands:
  peek  reads step 1 of workflow <id> from datasource_outputs by DBOS's rules
        (_check_execution, then deserialize_value with the row's serialization)
  txn   launches DBOS and runs workflow <id>: one datasource transaction inserting an order
        into the same `orders` table stead's steps use; returns the order's id
  fork  forks workflow <id> from step 2 with DBOSClient; returns the new workflow's id
"""

import json
import sys

import sqlalchemy as sa
from dbos import DBOS, DBOSClient
from dbos._datasource import SQLAlchemyDatasource
from dbos._serialization import DBOSDefaultSerializer, deserialize_value

system_url, app_url, command, workflow_id = sys.argv[1:5]


def peek():
    DBOS(config={"name": "stead-interop", "system_database_url": system_url})
    ds = SQLAlchemyDatasource.create(app_url)
    DBOS.launch()
    try:
        row = ds._check_execution(workflow_id, 1)
        if row is None:
            return None
        return deserialize_value(row["output"], row["serialization"], DBOSDefaultSerializer)
    finally:
        DBOS.destroy()


def txn():
    DBOS(config={"name": "stead-interop", "system_database_url": system_url})
    ds = SQLAlchemyDatasource.create(app_url)

    @ds.transaction()
    def insert_order() -> int:
        return ds.sql_session().execute(
            sa.text("INSERT INTO orders (wf) VALUES (:wf) RETURNING id"),
            {"wf": DBOS.workflow_id},
        ).scalar_one()

    @DBOS.workflow()
    def py_order() -> int:
        return insert_order()

    DBOS.launch()
    try:
        from dbos import SetWorkflowID

        with SetWorkflowID(workflow_id):
            return py_order()
    finally:
        DBOS.destroy()


def fork():
    client = DBOSClient(system_database_url=system_url)
    try:
        return client.fork_workflow(workflow_id, 2).get_workflow_id()
    finally:
        client.destroy()


print(json.dumps({"ok": {"peek": peek, "txn": txn, "fork": fork}[command]()}))
