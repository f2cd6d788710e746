#!/usr/bin/env bash
# The commit floor of a producer that waits for each enqueue: pgbench, one client, writing
# exactly one enqueue's DBOS rows per transaction (enqueue.sql) on a fresh system database.
# Nothing else runs, so no workflow engine can enqueue faster one at a time on this server.
#
#   benches/floor/run.sh [seconds]       (PGHOST/PGPORT/PGUSER as for psql; default 10 s)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
secs="${1:-10}"
export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
db=stead_floor
psql -XAtq -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
cargo bench -q --bench workloads -- migrate --db "postgres://$PGUSER@$PGHOST:$PGPORT/$db" >/dev/null
pgbench -n -M prepared -c 1 -T "$secs" -f "$here/enqueue.sql" "$db" | grep -E 'latency average|tps'
psql -XAtq -d postgres -c "DROP DATABASE $db"
