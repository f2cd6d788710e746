#!/usr/bin/env bash
# Alternating A/B of W7's replay: each depth (1,000, 10,000, 100,000 steps of 16 bytes) recorded
# once by NEW_BIN, then recovered from a fresh copy of that recording by each runner in turn
# (Postgres: a database made from it as a template; SQLite: a copy of the file), ROUNDS times.
# One line per runner and round: µs/step of the body, then of the run, at each depth.
#   benches/replay_ab.sh BASE_BIN NEW_BIN ROUNDS postgres|sqlite [DB_URL_PREFIX]
set -uo pipefail
base=$1 new=$2 rounds=$3 backend=$4 u=${5:-postgres://postgres@127.0.0.1:5432}
. "$(dirname "$0")/lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"; for n in 1000 10000 100000; do psql "$u/postgres" -qc "DROP DATABASE IF EXISTS r_ab_$n" >/dev/null 2>&1; done; psql "$u/postgres" -qc "DROP DATABASE IF EXISTS r_ab_run" >/dev/null 2>&1' EXIT
url() { case $backend in postgres) echo "$u/r_ab_$1" ;; *) echo "sqlite://$dir/$1.sqlite" ;; esac; }
copy() { # copy DEPTH: a fresh copy of that recording; prints its URL
  case $backend in
    postgres) psql "$u/postgres" -qc "DROP DATABASE IF EXISTS r_ab_run" \
                -c "CREATE DATABASE r_ab_run TEMPLATE r_ab_$1" >/dev/null 2>&1; echo "$u/r_ab_run" ;;
    *) rm -f "$dir"/run.sqlite*; cp "$dir/$1.sqlite" "$dir/run.sqlite"
       [ -f "$dir/$1.sqlite-wal" ] && cp "$dir/$1.sqlite-wal" "$dir/run.sqlite-wal"
       echo "sqlite://$dir/run.sqlite" ;;
  esac
}
for n in 1000 10000 100000; do
  [ "$backend" = postgres ] && fresh "$u" "r_ab_$n"
  "$new" replay-record --db "$(url $n)" --steps $n --n 16 >/dev/null 2>&1
done
for r in $(seq 1 "$rounds"); do
  for which in base new; do
    bin=$base; [ "$which" = new ] && bin=$new
    line="$r $which"
    for n in 1000 10000 100000; do
      out=$("$bin" replay-recover --db "$(copy $n)" --steps $n --n 16 2>&1)
      line="$line ${n}=$(echo "$out" | val us_per_step)|$(echo "$out" | val run_us_per_step)"
    done
    echo "$line load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
