#!/usr/bin/env bash
# W2 and W3f on Citus (a coordinator and two workers of the script's own, on this machine, all
# sharing its cores) beside direct Postgres, alternating per round, each on a fresh database
# (on Citus one made as an operator makes one: the extension on every node, the workers added);
# one line per run. Take medians over the rounds.
#   benches/citus.sh BIN ROUNDS [SERVER_URL] [SHARDS]
# BIN is the workload runner (`cargo build --release --bench workloads`, the binary under
# target/release/deps/workloads-*); SHARDS the sharded layout's buckets (default 8). Builds
# Citus from ../shared if it is not built (needs root), and removes its cluster at the end.
set -uo pipefail
bin=$1 rounds=$2 u=${3:-postgres://postgres@127.0.0.1:5432} shards=${4:-8}
shared=${STEAD_SHARED:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
[ -d "$shared/tools" ] || shared=/work/shared
CITUS_DIR=$(mktemp -d /var/tmp/stead-bench-citus.XXXXXX)
export CITUS_DIR CITUS_PORT_BASE=9850 CITUS_PG_CONF="max_connections = 300"
chown postgres "$CITUS_DIR" 2>/dev/null || true
"$shared/tools/citus.sh" build >/dev/null
"$shared/tools/citus.sh" up 2 >/dev/null || exit 1
trap '"$shared/tools/citus.sh" down >/dev/null; rm -rf "$CITUS_DIR"' EXIT
# shellcheck disable=SC1091
. "$CITUS_DIR/state.env"
cu="postgres://postgres@127.0.0.1:$CITUS_COORD_PORT"

fresh_citus() {
  psql "$cu/citus" -q -c "SET citus.enable_create_database_propagation = on" \
    -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1" >/dev/null 2>&1
  for p in $CITUS_COORD_PORT $CITUS_WORKER_PORTS; do
    psql "postgres://postgres@127.0.0.1:$p/$1" -qc "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
  done
  psql "$cu/$1" -qc "SELECT citus_set_coordinator_host('127.0.0.1', $CITUS_COORD_PORT)" >/dev/null
  for p in $CITUS_WORKER_PORTS; do
    psql "$cu/$1" -qc "SELECT citus_add_node('127.0.0.1', $p)" >/dev/null
  done
}

. "$(dirname "$0")/lib.sh"
for r in $(seq 1 "$rounds"); do
  for where in direct citus; do
    if [ "$where" = direct ]; then
      fresh "$u" h_citus; w2=$("$bin" w2 --db "$u/h_citus" --n 1000 --steps 10 2>&1 | val wf_per_s)
      fresh "$u" h_citus; w3f=$("$bin" w3 --db "$u/h_citus" --n 5000 --steps 1 --conc 50 \
        --poll-ms 10 2>&1 | val wf_per_s)
    else
      db="$cu/h_citus?sharding=citus&shards=$shards"
      fresh_citus h_citus; w2=$(BENCH_POLL_DB_URL="$cu/h_citus" "$bin" w2 --db "$db" --n 1000 \
        --steps 10 2>&1 | val wf_per_s)
      fresh_citus h_citus; w3f=$(BENCH_POLL_DB_URL="$cu/h_citus" "$bin" w3 --db "$db" --n 5000 \
        --steps 1 --conc 50 --poll-ms 10 2>&1 | val wf_per_s)
    fi
    echo "$r $where w2=$w2 w3f=$w3f load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
