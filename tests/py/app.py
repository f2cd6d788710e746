"""A DBOS Python 3.4 application sharing stead's database
(tests/integration/adoption/stranded.rs).

Usage: python app.py <system database URL> <application name> <count>

Launches DBOS (executor id "local", its default), starts <count> workflows that record one
step and then hold, prints their ids as {"ok": [...]} and waits to be killed.
"""

import json
import sys
import time

from dbos import DBOS, DBOSConfig

url, app, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
config: DBOSConfig = {"name": app, "system_database_url": url}
DBOS(config=config)


@DBOS.step()
def mark(i):
    return i


@DBOS.workflow()
def held(i):
    mark(i)
    time.sleep(3600)
    return i


DBOS.launch()
ids = [DBOS.start_workflow(held, i).get_workflow_id() for i in range(count)]
print(json.dumps({"ok": ids}), flush=True)
time.sleep(3600)
