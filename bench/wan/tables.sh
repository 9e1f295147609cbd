#!/usr/bin/env bash
# Many tables, little data, a long round trip: what a load's fixed round trips cost. TPC-H
# SF0.01 (8 tables, 10 MB, `--parts 2`) loaded with `--jobs 2` across the delay line
# (bench/delay.sh: RTT_MS round trip, no rate limit), into tables emptied (and the ledger
# dropped) before each run, ROUNDS times, interleaved with BASE_BIN (an earlier build) when it
# is set. Time is to the end of the load; with so little data it is almost all round trips in
# series. Needs root, ip, /dev/net/tun.
#
#   BASE_BIN=/path/to/older/sluice bench/wan/tables.sh [RTT_MS] [ROUNDS]   (defaults: 200, 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
rtt=${1:-200}; rounds=${2:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
bin=${SLUICE_BIN:-$CARGO_TARGET_DIR/release/sluice}
[ -x "$bin" ] || cargo build --release -q -p sluice
data=/tmp/sluice-wan-tables/sf001
[ -e "$data/region.tbl" ] || "$bin" gen tpch -q --scale 0.01 --parts 2 --out "$data" >/dev/null
if [ "${1:-}" != --inside ]; then
  export SLUICE_BIN=$bin DATA=$data ROUNDS=$rounds
  exec bench/wan/delay.sh "$rtt" 0 run "$0" --inside
fi
# On the client's side of the line ($URL names the far server).
psql=${PGBIN:-/usr/lib/postgresql/15/bin}/psql
"$SLUICE_BIN" ddl tpch --create --replace --target "$URL" >/dev/null
contenders="this${BASE_BIN:+ base}"
declare -A times
for r in $(seq 1 "$ROUNDS"); do
  for who in $contenders; do
    b=$SLUICE_BIN; [ "$who" = base ] && b=$BASE_BIN
    for t in customer lineitem nation orders part partsupp region supplier; do echo "TRUNCATE $t;"; done \
      | "$psql" -X -q "$URL" >/dev/null
    "$psql" -X -q "$URL" -c "DROP SCHEMA IF EXISTS sluice_ledger CASCADE" >/dev/null 2>&1
    t0=$(date +%s.%N)
    "$b" load -q --jobs 2 --target "$URL" "$DATA"/*/*.tbl "$DATA"/*.tbl >/dev/null
    t=$(since "$t0")
    echo "round $r $who ${t}s"
    times[$who]="${times[$who]:-} $t"
  done
done
medians $contenders
