# Shared by the side-by-side scripts (`ab.sh`, `pooler.sh`); sourced, not run.
# `fresh URL DB` drops and recreates database DB on the server at URL; `val KEY` prints KEY of
# the last RESULT line a workload runner wrote to stdin, or `failed`.
fresh() { psql "$1/postgres" -qc "DROP DATABASE IF EXISTS $2" -c "CREATE DATABASE $2" >/dev/null 2>&1; }
val() {
  python3 -c "import json,sys
lines = [l for l in sys.stdin.read().splitlines() if l.startswith('RESULT')]
print(json.loads(lines[-1][7:]).get('$1') if lines else 'failed')"
}
