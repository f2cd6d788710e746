#!/usr/bin/env bash
# Alternating A/B of two workload-runner binaries: W1, W2, W4 and W3f per round, base then new,
# each on a fresh database; one line per run. Take medians over the rounds.
#   benches/ab.sh BASE_BIN NEW_BIN ROUNDS [DB_URL_PREFIX]
set -uo pipefail
base=$1 new=$2 rounds=$3 u=${4:-postgres://postgres@127.0.0.1:5432}
. "$(dirname "$0")/lib.sh"
for r in $(seq 1 "$rounds"); do
  for which in base new; do
    bin=$base; [ "$which" = new ] && bin=$new
    fresh "$u" h_ab; w1=$("$bin" w1 --db "$u/h_ab" --steps 1000 2>&1 | val us_per_step)
    fresh "$u" h_ab; w2=$("$bin" w2 --db "$u/h_ab" --n 1000 --steps 10 2>&1 | val wf_per_s)
    fresh "$u" h_ab; "$bin" w4crash --db "$u/h_ab" --n 1000 --steps 10 >/dev/null 2>&1
    w4=$("$bin" w4recover --db "$u/h_ab" --n 1000 --steps 10 2>&1 | val total_s)
    fresh "$u" h_ab; w3f=$("$bin" w3 --db "$u/h_ab" --n 5000 --steps 1 --conc 50 --poll-ms 10 2>&1 | val wf_per_s)
    echo "$r $which w1=$w1 w2=$w2 w4=$w4 w3f=$w3f load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
