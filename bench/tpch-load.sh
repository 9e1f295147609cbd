#!/usr/bin/env bash
# TPC-H load benchmark: sluice against psql \copy and against the server's own ceiling, in one
# run, on one fresh cluster.
#
#   bench/tpch-load.sh [--scale 1] [--parts 4] [--repeat 3] [--jobs 2]
#
# Contenders, each timed on empty TPC-H tables (no indexes) and verified by row count:
#   sluice        sluice load --jobs N over every .tbl file
#   psql-serial   psql \copy, one file after another
#   psql-N        psql \copy, N files at a time
#   ceiling       the same rows as pre-encoded binary COPY files (made once, untimed),
#                 replayed by N psql at a time: the server's limit with no client work
# plus the client side alone: sluice --dry-run --jobs 1 on lineitem.
#
# Repeats are interleaved (every contender once, then again) so that drift on a shared machine
# hits all of them alike. Results: a markdown table on stdout and bench/out/results-*.md.
set -euo pipefail

SCALE=1 PARTS=4 REPEAT=3 JOBS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) SCALE=$2; shift 2 ;;
    --parts) PARTS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/bench/out
DATA=$ROOT/bench/data/sf$SCALE-p$PARTS
mkdir -p "$OUT"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
SLUICE=$ROOT/target/release/sluice

BIN=$(pg_config --bindir 2>/dev/null || true)
[ -x "$BIN/initdb" ] || BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$BIN/initdb" ] || { echo "PostgreSQL server binaries not found: apt-get install postgresql" >&2; exit 1; }
PSQL=$BIN/psql

# Data, generated once (sluice gen tpch writes dbgen-identical files).
if ! [ -f "$DATA/.sluice-gen.json" ]; then
  "$SLUICE" gen tpch --scale "$SCALE" --parts "$PARTS" --out "$DATA" -q
fi
mapfile -t TBL < <(find "$DATA" -name '*.tbl' | sort)
BYTES=$(cat "${TBL[@]}" | wc -c)

# A fresh cluster with one fixed configuration.
PGDIR=$(mktemp -d /tmp/sluice-bench.XXXXXX)
RUNAS=()
if [ "$(id -u)" = 0 ]; then chown postgres "$PGDIR"; chmod 755 "$PGDIR"; RUNAS=(runuser -u postgres --); fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${RUNAS[@]}" "$BIN/initdb" -D "$PGDIR/data" -U sluice --auth=trust -E UTF8 --locale=C >/dev/null
cat >> "$PGDIR/data/postgresql.auto.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$PGDIR'
shared_buffers = '1GB'
max_wal_size = '16GB'
wal_level = 'replica'
EOF
"${RUNAS[@]}" "$BIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -w start >/dev/null
trap '"${RUNAS[@]}" "$BIN/pg_ctl" -D "$PGDIR/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$PGDIR"' EXIT
URL="postgresql://sluice@127.0.0.1:$PORT/postgres?sslmode=disable"
Q() { "$PSQL" -X -q -v ON_ERROR_STOP=1 -d "$URL" "$@"; }

DDL=$("$SLUICE" ddl tpch)
fresh_tables() {
  Q -c "DROP TABLE IF EXISTS lineitem, orders, partsupp, part, customer, supplier, nation, region" -c "$DDL" -c "CHECKPOINT"
}
table_of() { basename "$1" | cut -d. -f1; }

# Untimed preparation: stripped copies for psql (no trailing |), binary files for the ceiling.
PREP=$DATA/prepared
if ! [ -f "$PREP/.done" ]; then
  rm -rf "$PREP"; mkdir -p "$PREP"
  fresh_tables
  for f in "${TBL[@]}"; do
    b=$(basename "$f")
    sed 's/|$//' "$f" > "$PREP/$b.txt"
    t=$(table_of "$f")
    Q -c "CREATE TEMP TABLE x (LIKE $t)" \
      -c "\\copy x from '$PREP/$b.txt' with (delimiter '|')" \
      -c "\\copy x to '$PREP/$b.bin' with (format binary)"
  done
  touch "$PREP/.done"
fi

# Expected rows per table, from the generator's manifest.
declare -A EXPECT
while read -r t n; do EXPECT[$t]=$n; done < <(python3 - "$DATA/.sluice-gen.json" <<'PY'
import json, sys, collections
m = json.load(open(sys.argv[1])); c = collections.Counter()
for f in m["files"]: c[f["table"]] += f["rows"]
for t, n in c.items(): print(t, n)
PY
)
verify() {
  for t in "${!EXPECT[@]}"; do
    got=$(Q -Atc "SELECT count(*) FROM $t")
    if [ "$got" != "${EXPECT[$t]}" ]; then echo "VERIFY FAILED: $1 loaded $got rows into $t, expected ${EXPECT[$t]}" >&2; exit 1; fi
  done
}

copy_text() { Q -c "\\copy $(table_of "$1") from '$PREP/$(basename "$1").txt' with (delimiter '|')"; }
copy_bin() { Q -c "\\copy $(table_of "$1") from '$PREP/$(basename "$1").bin' with (format binary)"; }
export -f copy_text copy_bin table_of Q
export PSQL URL PREP

run() {
  local name=$1; shift
  fresh_tables
  local t0 t1
  t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N)
  verify "$name"
  echo "$name $(echo "$t1 - $t0" | bc)" >> "$OUT/raw.txt"
}
c_sluice() { "$SLUICE" load -q --jobs "$JOBS" --target "$URL" "${TBL[@]}" >/dev/null; }
c_serial() { for f in "${TBL[@]}"; do copy_text "$f"; done; }
c_parallel() { printf '%s\n' "${TBL[@]}" | xargs -P "$JOBS" -I{} bash -c 'copy_text "$1"' _ {}; }
c_ceiling() { printf '%s\n' "${TBL[@]}" | xargs -P "$JOBS" -I{} bash -c 'copy_bin "$1"' _ {}; }

# One untimed round first: the preparation above leaves the server and the page cache in a
# state no timed run should inherit.
: > "$OUT/raw.txt"
run sluice c_sluice; run ceiling c_ceiling
: > "$OUT/raw.txt"
for r in $(seq "$REPEAT"); do
  echo "repeat $r/$REPEAT" >&2
  run sluice c_sluice
  run "psql-$JOBS" c_parallel
  run ceiling c_ceiling
  run psql-serial c_serial
done
# The client side alone.
LINEITEM=$(printf '%s\n' "${TBL[@]}" | grep /lineitem)
LBYTES=$(cat $LINEITEM | wc -c)
for r in $(seq "$REPEAT"); do
  t0=$(date +%s.%N); "$SLUICE" load -q --dry-run --jobs 1 --target "$URL" $LINEITEM >/dev/null; t1=$(date +%s.%N)
  echo "dry-run $(echo "$t1 - $t0" | bc)" >> "$OUT/raw.txt"
done

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
python3 - "$OUT/raw.txt" "$BYTES" "$LBYTES" "$SCALE" "$PARTS" "$JOBS" "$REPEAT" > "$OUT/results-$STAMP.md" <<'PY'
import sys, statistics, collections, platform, os, subprocess
raw, total, lbytes, scale, parts, jobs, repeat = sys.argv[1:]
total, lbytes = int(total), int(lbytes)
runs = collections.defaultdict(list)
for line in open(raw):
    name, secs = line.split(); runs[name].append(float(secs))
med = {k: statistics.median(v) for k, v in runs.items()}
ceiling = med["ceiling"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"TPC-H SF{scale} in {parts} parts ({total/1e9:.2f} GB of .tbl), {jobs} jobs, {repeat} interleaved repeats")
print(f"Machine: {os.cpu_count()} cores ({cpu}), {os.sysconf('SC_PAGE_SIZE')*os.sysconf('SC_PHYS_PAGES')/2**30:.0f} GiB, server on the same machine")
print()
print("| loader | median s | min s | max s | MB/s | vs ceiling | sluice vs it |")
print("|---|---:|---:|---:|---:|---:|---:|")
for k in ["sluice", f"psql-{jobs}", "psql-serial", "ceiling"]:
    v = runs[k]
    print(f"| {k} | {med[k]:.2f} | {min(v):.2f} | {max(v):.2f} | {total/1e6/med[k]:.1f} | {ceiling/med[k]:.3f} | {med[k]/med['sluice']:.3f}x |")
d = runs["dry-run"]
print()
print(f"Client side alone, `sluice load --dry-run --jobs 1` on lineitem ({lbytes/1e6:.0f} MB): "
      f"median {statistics.median(d):.2f} s = {lbytes/1e6/statistics.median(d):.0f} MB/s (min {min(d):.2f}, max {max(d):.2f}).")
PY
cat "$OUT/results-$STAMP.md"
