#!/usr/bin/env bash
# Files cut elsewhere than the partitions (another generator's parts): TPC-H SF1 made by
# tpchgen-cli 4.0 (PyPI) in 4 parts, whose lineitem parts start a few dozen orders before
# `sluice ddl tpch --partitions 4`'s bounds. Three loads, interleaved, ROUNDS times each, on
# sluice's private cluster, each into freshly created tables of its own database:
#   auto        this sluice, --strategy auto, partitioned layout with keys
#   auto-base   another sluice binary (BASE, e.g. the commit before), the same
#   direct      this sluice, --strategy direct, plain tables with keys
#
#   bench/misaligned/run.sh BASE [ROUNDS] [JOBS]
set -euo pipefail
cd "$(dirname "$0")/../.."
base=$1; rounds=${2:-3}; jobs=${3:-2}
bin=target/release/sluice
[ -x "$bin" ] || cargo build --release -p sluice
data=/tmp/sluice-bench-misaligned/sf1
if [ ! -e "$data/lineitem/lineitem.4.tbl" ]; then
  python3 -m venv /tmp/sluice-bench-misaligned/venv
  /tmp/sluice-bench-misaligned/venv/bin/pip install -q tpchgen-cli==4.0.0
  /tmp/sluice-bench-misaligned/venv/bin/tpchgen-cli -s 1 --parts 4 --output-dir "$data"
fi
export SLUICE_PG_DIR=${SLUICE_PG_DIR:-/tmp/sluice-bench-misaligned/pg}
"$bin" pg start >/dev/null
url=$("$bin" pg url)
sql() { "$bin" pg psql -- -X -q -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }
for db in auto auto_base direct; do
  sql "DROP DATABASE IF EXISTS $db" && sql "CREATE DATABASE $db"
done
files=("$data"/*/*.tbl)
declare -A times
for r in $(seq 1 "$rounds"); do
  for who in auto auto_base direct; do
    target=$(echo "$url" | sed "s#/[^/?]*\(?\|$\)#/$who\1#")
    case $who in
      direct) "$bin" ddl tpch --create --replace --keys --target "$target" >/dev/null; b=$bin; strategy=direct ;;
      auto) "$bin" ddl tpch --create --replace --keys --partitions 4 --target "$target" >/dev/null; b=$bin; strategy=auto ;;
      auto_base) "$bin" ddl tpch --create --replace --keys --partitions 4 --target "$target" >/dev/null; b=$base; strategy=auto ;;
    esac
    sql "CHECKPOINT"
    t0=$(date +%s.%N)
    "$b" load -q --target "$target" --jobs "$jobs" --strategy "$strategy" --restart "${files[@]}" \
      > "/tmp/sluice-bench-misaligned/$who.out" 2>&1
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    echo "round $r $who ${t}s"
    times[$who]="${times[$who]:-} $t"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for who in auto auto_base direct; do echo "median $who $(echo "${times[$who]}" | median)s"; done
grep -h "strategy:\|direct:" /tmp/sluice-bench-misaligned/auto.out | cut -c1-160 | head -8
