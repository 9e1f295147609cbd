#!/usr/bin/env bash
# What two-phase commit (--prepare) costs: TPC-H lineitem loaded direct into a plain table,
# --prepare on and off interleaved, ROUNDS times each, on sluice's private cluster (bulk
# settings, max_prepared_transactions=64). Prints each run's seconds, then medians and ratio.
#
#   bench/prepare/run.sh [SCALE] [ROUNDS] [JOBS]     (defaults: 1, 5, 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
scale=${1:-1}; rounds=${2:-5}; jobs=${3:-2}
bin=target/release/sluice
[ -x "$bin" ] || cargo build --release -p sluice
export SLUICE_PG_DIR=${SLUICE_PG_DIR:-/tmp/sluice-bench-prepare/pg}
data=/tmp/sluice-bench-prepare/sf$scale
if [ ! -e "$data/lineitem/lineitem.1.tbl" ]; then
  "$bin" gen tpch -q --scale "$scale" --parts 8 --out "$data" --tables lineitem
fi
"$bin" pg start >/dev/null
url=$("$bin" pg url)
psql_() { "$bin" pg psql -- -X -q -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }
"$bin" ddl tpch --create --replace --target "$url" >/dev/null
declare -A times
for r in $(seq 1 "$rounds"); do
  for mode in off on; do
    psql_ "TRUNCATE lineitem"
    psql_ "CHECKPOINT"
    t0=$(date +%s.%N)
    "$bin" load -q --target "$url" --jobs "$jobs" --strategy direct --restart \
      --prepare "$mode" "$data"/lineitem/lineitem.*.tbl >/dev/null
    t=$(since "$t0")
    echo "round $r prepare=$mode ${t}s"
    times[$mode]="${times[$mode]:-} $t"
  done
done
off=$(echo "${times[off]}" | median); on=$(echo "${times[on]}" | median)
echo "median: prepare=off ${off}s, prepare=on ${on}s, on/off $(echo "scale=3; $on/$off" | bc)"
