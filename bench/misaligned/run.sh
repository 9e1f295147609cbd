#!/usr/bin/env bash
# The stage strategy on files that do not line up with the partitions (issue 33): TPC-H SF1 in
# 4 parts, loaded with --jobs JOBS into `sluice ddl tpch --partitions 4 --keys` (auto) and,
# for direct, into plain tables with the same keys, on sluice's private cluster with
# wal_level = minimal. Inputs:
#   misaligned  tpchgen-cli 4.0's parts (PyPI), all eight tables: lineitem's parts 2-4 start
#               a few dozen orders before the partitions' bounds
#   shuffled    lineitem alone, its rows shuffled (shuf, fixed seed) into 4 files: every file
#               holds rows of every partition
#   aligned     `sluice gen`'s parts, all eight tables: each file one partition's
# Loads, interleaved, ROUNDS times each, each into freshly created tables of its own database:
#   auto        this build, --strategy auto, partitioned layout
#   base        another sluice binary (BASE, e.g. the commit before), the same
#   direct      this build, --strategy direct, plain tables
# Each time includes a final CHECKPOINT. Also reported: the WAL written (load and checkpoint),
# the process's peak resident memory, and the spill routing wrote (from the summary).
#
#   bench/misaligned/run.sh BASE [ROUNDS] [JOBS] [INPUTS]
#   (INPUTS: a comma list of misaligned, shuffled, aligned; default all three)
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
base=$1; rounds=${2:-3}; jobs=${3:-2}; inputs=${4:-misaligned,shuffled,aligned}
bin=target/release/sluice
[ -x "$bin" ] || cargo build --release -p sluice
work=/tmp/sluice-bench-misaligned
data=$work/sf1
if [ ! -e "$data/lineitem/lineitem.4.tbl" ]; then
  python3 -m venv $work/venv
  $work/venv/bin/pip install -q tpchgen-cli==4.0.0
  $work/venv/bin/tpchgen-cli -s 1 --parts 4 --output-dir "$data"
fi
if [ ! -e "$work/shuffled/lineitem/lineitem.4.tbl" ]; then
  mkdir -p $work/shuffled/lineitem
  cat "$data"/lineitem/*.tbl | shuf --random-source=<(yes) > $work/shuffled/all.tbl
  n=$(wc -l < $work/shuffled/all.tbl)
  split -l $(( (n + 3) / 4 )) -d -a1 --additional-suffix=.tbl $work/shuffled/all.tbl \
    $work/shuffled/lineitem/x
  rm $work/shuffled/all.tbl
  for i in 0 1 2 3; do mv $work/shuffled/lineitem/x$i.tbl $work/shuffled/lineitem/lineitem.$((i + 1)).tbl; done
fi
if [ ! -e "$work/aligned/lineitem" ]; then
  "$bin" gen tpch --scale 1 --parts 4 --out $work/aligned >/dev/null
fi
export SLUICE_PG_DIR=${SLUICE_PG_DIR:-$work/pg}
"$bin" pg start >/dev/null
url=$("$bin" pg url)
sql() { "$bin" pg psql -- -X -q -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }
value() { "$bin" pg psql -- -X -qAt -v ON_ERROR_STOP=1 -c "$1"; }
if [ "$(value "SHOW wal_level")" != minimal ]; then
  sql "ALTER SYSTEM SET wal_level = minimal"
  sql "ALTER SYSTEM SET max_wal_senders = 0"
  "$bin" pg stop >/dev/null && "$bin" pg start >/dev/null
fi
for db in auto base direct; do
  sql "DROP DATABASE IF EXISTS $db" && sql "CREATE DATABASE $db"
done
declare -A times wal rss spill
for r in $(seq 1 "$rounds"); do
  for input in ${inputs//,/ }; do
    case $input in
      misaligned) files=("$data"/*/*.tbl) ;;
      shuffled) files=("$work"/shuffled/lineitem/*.tbl) ;;
      aligned) files=("$work"/aligned/*.tbl "$work"/aligned/*/*.tbl*) ;;
    esac
    for who in auto base direct; do
      target=$(echo "$url" | sed "s#/[^/?]*\(?\|$\)#/$who\1#")
      case $who in
        direct) layout=(--keys); b=$bin; strategy=direct ;;
        auto) layout=(--keys --partitions 4); b=$bin; strategy=auto ;;
        base) layout=(--keys --partitions 4); b=$base; strategy=auto ;;
      esac
      "$bin" ddl tpch --create --replace "${layout[@]}" --target "$target" >/dev/null
      sql "CHECKPOINT"
      lsn0=$(value "SELECT pg_current_wal_lsn()")
      out=$work/$input-$who.out
      t0=$(date +%s.%N)
      /usr/bin/time -f "rss %M" -o $work/rss "$b" load -q --target "$target" --jobs "$jobs" \
        --strategy "$strategy" --restart "${files[@]}" > "$out" 2>&1
      sql "CHECKPOINT"
      t=$(since "$t0")
      w=$(value "SELECT pg_current_wal_lsn() - '$lsn0'::pg_lsn")
      m=$(awk '/^rss/ {print $2}' $work/rss)
      s=$(grep -o 'spill [0-9.]* [kMG]B' "$out" | awk '{print $2 $3}' | paste -sd+ || true)
      echo "round $r $input $who ${t}s wal $((w / 1048576)) MiB rss $((m / 1024)) MiB spill ${s:-none}"
      times[$input-$who]="${times[$input-$who]:-} $t"
      wal[$input-$who]=$((w / 1048576)); rss[$input-$who]=$((m / 1024)); spill[$input-$who]=${s:-none}
    done
  done
done
echo
echo "| input | load | runs (s) | median (s) | vs direct | WAL (MiB) | peak RSS (MiB) | spill |"
echo "|---|---|---|---:|---:|---:|---:|---|"
for input in ${inputs//,/ }; do
  d=$(echo "${times[$input-direct]}" | median)
  for who in auto base direct; do
    m=$(echo "${times[$input-$who]}" | median)
    ratio=$(echo "scale=2; $d / $m" | bc)
    echo "| $input | $who | $(echo ${times[$input-$who]} | sed 's/ /, /g') | $m | ${ratio}x | ${wal[$input-$who]} | ${rss[$input-$who]} | ${spill[$input-$who]} |"
  done
done
for input in ${inputs//,/ }; do
  echo "--- $input, auto:"
  grep -h "strategy:\|routed:\|direct:\|stage:" $work/$input-auto.out | cut -c1-220 | head -6
done
