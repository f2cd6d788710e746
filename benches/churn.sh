#!/usr/bin/env bash
# Row versions per workflow (W9's path, no hold): a 10 s run at 300 workflows/s on a fresh
# database, then each system table's inserts, updates (HOT among them) and deletes per finished
# workflow, from pg_stat_user_tables. The database is dropped afterwards.
#   benches/churn.sh BIN [DB_URL_PREFIX]
set -euo pipefail
bin=$1 u=${2:-postgres://postgres@127.0.0.1:5432}
db=h_churn
"$bin" w9 --db "$u/$db" --conc 8 --rate 300 --clean-s 10 --hold-s 0 --after-s 2 >/dev/null 2>&1
sleep 1 # the statistics collector flushes within a second
psql "$u/$db" -c "
WITH n AS (SELECT count(*)::numeric AS n FROM dbos.workflow_status WHERE status = 'SUCCESS')
SELECT relname AS table, n.n AS workflows, round(n_tup_ins / n.n, 2) AS ins,
       round(n_tup_upd / n.n, 2) AS upd, round(n_tup_hot_upd / n.n, 2) AS hot,
       round(n_tup_del / n.n, 2) AS del
FROM pg_stat_user_tables, n
WHERE schemaname = 'dbos' AND n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY 1"
psql "$u/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)"
