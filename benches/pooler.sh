#!/usr/bin/env bash
# W2 and W3f direct against the server and through PgBouncer in transaction mode
# (`pooler=transaction`), alternating per round, each on a fresh database; one line per run.
# Take medians over the rounds. Starts its own PgBouncer (Debian's) on a free port and stops it.
#   benches/pooler.sh BIN ROUNDS [SERVER_URL]
# BIN is the workload runner (`cargo build --release --bench workloads`, the binary under
# target/release/deps/workloads-*). W3's poller reads the server directly in both runs.
set -uo pipefail
bin=$1 rounds=$2 u=${3:-postgres://postgres@127.0.0.1:5432}
hostport=${u#*@}
host=${hostport%:*} port=${hostport#*:}
dir=$(mktemp -d)
bport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=$host port=$port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 40
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
echo '"postgres" ""' >"$dir/users.txt"
chown -R postgres "$dir" 2>/dev/null || true
if [ "$(id -u)" = 0 ]; then runuser -u postgres -- pgbouncer -d "$dir/pgbouncer.ini"; else pgbouncer -d "$dir/pgbouncer.ini"; fi
trap 'kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
sleep 0.5

. "$(dirname "$0")/lib.sh"
for r in $(seq 1 "$rounds"); do
  for via in direct pgbouncer; do
    db="$u/h_pool"
    [ "$via" = pgbouncer ] && db="postgres://postgres@127.0.0.1:$bport/h_pool?pooler=transaction"
    fresh "$u" h_pool; w2=$("$bin" w2 --db "$db" --n 1000 --steps 10 2>&1 | val wf_per_s)
    fresh "$u" h_pool; w3f=$(BENCH_POLL_DB_URL="$u/h_pool" "$bin" w3 --db "$db" --n 5000 --steps 1 --conc 50 \
      --poll-ms 10 2>&1 | val wf_per_s)
    echo "$r $via w2=$w2 w3f=$w3f load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
