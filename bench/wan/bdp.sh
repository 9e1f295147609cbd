#!/usr/bin/env bash
# A long fat path, for real: SF1 lineitem (8 files, 760 MB) loaded across the delay line
# (bench/wan/delayline) at RTT_MS round trip and RATE_MBIT, where one stream with the kernel's
# default buffers is window-bound. Two lines run side by side from one server of the bench's
# own (PostgreSQL 15, sluice's bulk settings, listening on both lines' far ends): the delayed
# one and one of the same rate with no delay. `sluice probe --upload-only` runs first across
# the delayed line and chooses --jobs and --socket-buffer; then, interleaved, ROUNDS times:
#   probe     sluice load --wire text, the probe's --jobs and --socket-buffer, across the delay
#   nodelay   the same flags, across the line with no delay
#   psql-2    psql \copy, two files at a time, across the delay
#   jobs1     sluice load --wire text --jobs 1 --socket-buffer off, across the delay
#   off       the probe's --jobs with --socket-buffer off (autotuning), across the delay
#   base      the probe's settings across the delay with another sluice ($BASE_BIN: an earlier
#             build, for a before and after in one sitting)
#   idle0     as probe, with the client's net.ipv4.tcp_slow_start_after_idle = 0 for that run (a
#             connection idle longer than its retransmission timeout keeps its window)
#   chunks    as probe, with --chunk-size $CHUNK (default 32M: three times the chunks, so that
#             the streams end closer together, each chunk paying its own round trips)
# CONTENDERS picks and orders them (default: "probe nodelay psql-2 jobs1 off", plus base when
# BASE_BIN is set). TLS=1 starts the server with ssl = on and every client (sluice, psql) with
# sslmode=require. JOBS=N overrides the probe's --jobs, BUFFER=SIZE|off its --socket-buffer
# (the probe is still run and shown).
# The line's bottleneck queue holds one round trip of the rate (BACKLOG_MS to change it); the
# clients' congestion control is the machine's unless CC names another (CC=cubic: a namespace
# may use only what net.ipv4.tcp_allowed_congestion_control lists, set in the machine's own).
# Each after TRUNCATE and CHECKPOINT, timed to the end of the load. Everything is torn down on
# exit, Ctrl-C included. Needs root, ip, /dev/net/tun.
#
#   bench/wan/bdp.sh [RTT_MS] [RATE_MBIT] [ROUNDS]     (defaults: 200, 200, 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
rtt=${1:-200}; rate=${2:-200}; rounds=${3:-3}
# The bottleneck's queue: one round trip of the rate (a BDP, the classic router buffer), at
# least 50 ms. A shorter one drops in every slow start and loss recovery takes round trips.
backlog=${BACKLOG_MS:-$(( rtt > 50 ? rtt : 50 ))}
[ "$(id -u)" = 0 ] || { echo "bench/wan/bdp.sh needs root (network namespaces, TUN)" >&2; exit 2; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
bin=${SLUICE_BIN:-$CARGO_TARGET_DIR/release/sluice}
dl=$CARGO_TARGET_DIR/release/delayline
[ -x "$bin" ] && [ -x "$dl" ] || cargo build --release -q -p sluice -p delayline
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
data=/tmp/sluice-wan/sf1
stripped=/tmp/sluice-wan/stripped
work=${WORK:-/tmp/sluice-bdp}
port=${PORT:-5479}
mkdir -p "$work" "$stripped"
if [ ! -e "$data/lineitem/lineitem.8.tbl" ]; then
  "$bin" gen tpch -q --scale 1 --parts 8 --out "$data" --tables lineitem
fi
for f in "$data"/lineitem/*.tbl; do
  s=$stripped/$(basename "$f")
  [ -e "$s" ] || sed 's/|$//' "$f" > "$s"
done
pids=()
cleanup() {
  trap - EXIT INT TERM
  su postgres -c "$pgbin/pg_ctl -D $work/pg -m fast stop" >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# line NAME RTT: starts a line, sets NAME_ns and NAME_server.
line() {
  rm -f "$work/$1.line"
  "$dl" up --rtt-ms "$2" --rate-mbit "$rate" --backlog-ms "$backlog" > "$work/$1.line" 2> "$work/$1.err" &
  pids+=($!)
  for _ in $(seq 1 50); do [ -s "$work/$1.line" ] && break; sleep 0.1; done
  read -r _ ns _ _ _ server _ < "$work/$1.line" || { cat "$work/$1.err" >&2; exit 1; }
  printf -v "$1_ns" %s "$ns"; printf -v "$1_server" %s "$server"
}
line far "$rtt"
line near 0
# The clients' congestion control: CC=cubic (say) for another than the machine's.
if [ -n "${CC:-}" ]; then
  for ns in "$far_ns" "$near_ns"; do ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_congestion_control="$CC"; done
fi
cc=$(ip netns exec "$far_ns" sysctl -n net.ipv4.tcp_congestion_control)
. bench/wan/far-pg.sh  # (the working directory is the repository's root)
far_pg "$work" "$pgbin" "$bin" "$port" "$far_server,$near_server"
sslmode=disable; [ "${TLS:-0}" = 1 ] && sslmode=require
far_url="postgresql://sluice@$far_server:$port/postgres?sslmode=$sslmode"
near_url="postgresql://sluice@$near_server:$port/postgres?sslmode=$sslmode"
echo "far: $far_ns -> $far_server (${rtt} ms, ${rate} Mbit/s); near: $near_ns -> $near_server (0 ms, ${rate} Mbit/s); bottleneck queue ${backlog} ms; congestion control $cc; sslmode=$sslmode"
sql() { psql -X -q -v ON_ERROR_STOP=1 "$near_url" -c "$1" >/dev/null; }
"$bin" ddl tpch --create --replace --target "$near_url" >/dev/null
ip netns exec "$far_ns" "$bin" probe --target "$far_url" --upload-only --jobs 1,2,4 > "$work/probe.out" 2>&1
cat "$work/probe.out"
jobs=$(sed -n 's/^recommended: --jobs \([0-9]*\).*/\1/p' "$work/probe.out")
buffer=$(sed -n 's/^recommended: --socket-buffer \([^ ]*\).*/\1/p' "$work/probe.out")
# The probe measured upload only: the server's knee is not in it, so at least 2 streams.
[ "$jobs" -ge 2 ] || jobs=2
jobs=${JOBS:-$jobs}
buffer=${BUFFER:-$buffer}
echo "probe-chosen: --jobs $jobs --socket-buffer $buffer"
declare -A times
contenders=${CONTENDERS:-probe nodelay psql-2 jobs1 off${BASE_BIN:+ base}}
for r in $(seq 1 "$rounds"); do
  for who in $contenders; do
    sql "TRUNCATE lineitem"; sql "DROP SCHEMA IF EXISTS sluice_ledger CASCADE"; sql "CHECKPOINT"
    t0=$(date +%s.%N)
    case $who in
      probe) ip netns exec "$far_ns" "$bin" load -q --target "$far_url" --wire text \
          --jobs "$jobs" --socket-buffer "$buffer" --strategy direct "$data"/lineitem/*.tbl \
          > "$work/$who.out" ;;
      nodelay) ip netns exec "$near_ns" "$bin" load -q --target "$near_url" --wire text \
          --jobs "$jobs" --socket-buffer "$buffer" --strategy direct "$data"/lineitem/*.tbl \
          > "$work/$who.out" ;;
      psql-2) ls "$stripped"/*.tbl | ip netns exec "$far_ns" xargs -P 2 -I{} \
          psql -X -q -v ON_ERROR_STOP=1 "$far_url" -c "\\copy lineitem from '{}' with (delimiter '|')" ;;
      off) ip netns exec "$far_ns" "$bin" load -q --target "$far_url" --wire text \
          --jobs "$jobs" --socket-buffer off --strategy direct "$data"/lineitem/*.tbl \
          > "$work/$who.out" ;;
      base) ip netns exec "$far_ns" "$BASE_BIN" load -q --target "$far_url" --wire text \
          --jobs "$jobs" --socket-buffer "$buffer" --strategy direct "$data"/lineitem/*.tbl \
          > "$work/$who.out" ;;
      chunks) ip netns exec "$far_ns" "$bin" load -q --target "$far_url" --wire text \
          --jobs "$jobs" --socket-buffer "$buffer" --strategy direct --chunk-size "${CHUNK:-32M}" \
          "$data"/lineitem/*.tbl > "$work/$who.out" ;;
      jobs1) ip netns exec "$far_ns" "$bin" load -q --target "$far_url" --wire text \
          --jobs 1 --socket-buffer off --strategy direct "$data"/lineitem/*.tbl > "$work/$who.out" ;;
      idle0) ip netns exec "$far_ns" sysctl -q -w net.ipv4.tcp_slow_start_after_idle=0
          # The sysctl goes back whether or not the load succeeds.
          s=0; ip netns exec "$far_ns" "$bin" load -q --target "$far_url" --wire text \
          --jobs "$jobs" --socket-buffer "$buffer" --strategy direct "$data"/lineitem/*.tbl \
          > "$work/$who.out" || s=$?
          ip netns exec "$far_ns" sysctl -q -w net.ipv4.tcp_slow_start_after_idle=1
          [ "$s" = 0 ] || exit "$s" ;;
    esac
    t=$(since "$t0")
    rows=$(psql -X -At "$near_url" -c "select count(*) from lineitem")
    echo "round $r $who ${t}s ($rows rows)"
    times[$who]="${times[$who]:-} $t"
  done
done
medians $contenders
for who in $contenders; do [ -e "$work/$who.out" ] || continue; echo "== $who"; grep -h "verdict\|bound\|wire:" "$work/$who.out" | head -4; done
for n in far near; do echo "line $n: $(cat "$work/$n.err" 2>/dev/null)"; done
