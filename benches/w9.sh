#!/usr/bin/env bash
# W9 (a held snapshot) on a cluster of its own with autovacuum on (the shared server has it off):
# initdb on a free port, then for each round each runner binary in turn (alternating which goes
# first), each on a fresh database; the cluster is removed at the end. One RESULT line per run
# goes to OUT (default w9-results.jsonl); the slices go to stderr as they come.
#   benches/w9.sh ROUNDS BIN [BIN2] -- [w9 flags, e.g. --rate 300 --hold-s 600]
# BIN is the workload runner (`cargo build --release --bench workloads`, the binary under
# target/release/deps/workloads-*); with BIN2 the two are compared side by side.
set -uo pipefail
rounds=$1; shift
bins=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do bins+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
out=${OUT:-w9-results.jsonl}
bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
dir=$(mktemp -d /var/tmp/stead-w9.XXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
chown postgres "$dir" 2>/dev/null || true
as_pg "$bindir/initdb" -D "$dir/data" -U postgres -A trust >/dev/null
cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
autovacuum = on
shared_buffers = 256MB
max_connections = 100
CONF
as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
trap 'as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null; rm -rf "$dir"' EXIT
u="postgres://postgres@127.0.0.1:$port"
echo "cluster on $port (autovacuum on) in $dir" >&2
. "$(dirname "$0")/lib.sh"
for r in $(seq 1 "$rounds"); do
  order=("${bins[@]}")
  if [ $((r % 2)) = 0 ] && [ ${#bins[@]} = 2 ]; then order=("${bins[1]}" "${bins[0]}"); fi
  for bin in "${order[@]}"; do
    echo "round $r: $bin" >&2
    "$bin" w9 --db "$u/w9" --conc 8 "$@" | sed -n 's/^RESULT //p' \
      | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['bin']='$bin'; r['round']=$r; print(json.dumps(r))" >>"$out"
  done
done
