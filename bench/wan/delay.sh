#!/usr/bin/env bash
# A wide-area path on one machine: the client in a network namespace of its own, joined to
# this namespace by the delay line (bench/wan/delayline: TUN devices, each packet held RTT/2
# each way, optionally a rate limit), and a PostgreSQL 15 server of the bench's own on the far
# side, listening on the line's server address only. Everything (line, namespace, devices,
# server) is torn down on exit, Ctrl-C included. Needs root, ip, /dev/net/tun.
#
#   bench/wan/delay.sh RTT_MS [RATE_MBIT] hold      hold the path, print the URL; Ctrl-C ends
#   bench/wan/delay.sh RTT_MS [RATE_MBIT] check     one TCP stream, default buffers, across it
#   bench/wan/delay.sh RTT_MS [RATE_MBIT] run CMD.. run CMD on the client side (URL in $URL)
#
# RATE_MBIT 0 (the default) leaves the rate unlimited.
set -euo pipefail
cd "$(dirname "$0")/../.."
rtt=${1:?RTT_MS}; rate=${2:-0}; mode=${3:-hold}; shift 3 || shift $#
[ "$(id -u)" = 0 ] || { echo "bench/wan/delay.sh needs root (network namespaces, TUN)" >&2; exit 2; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
dl=$CARGO_TARGET_DIR/release/delayline
bin=$CARGO_TARGET_DIR/release/sluice
# Built before anything is set up, so that nothing waits on a build with the path up.
[ -x "$dl" ] || cargo build --release -q -p delayline
[ -x "$bin" ] || cargo build --release -q -p sluice
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
work=${WORK:-/tmp/sluice-delay}
port=${PORT:-5478}
mkdir -p "$work"
rate_flag=()
# With a rate, the bottleneck's queue holds one round trip of it (at least 50 ms).
[ "$rate" = 0 ] || rate_flag=(--rate-mbit "$rate" --backlog-ms "${BACKLOG_MS:-$(( rtt > 50 ? rtt : 50 ))}")
if [ "$mode" = check ]; then
  exec "$dl" tcp --rtt-ms "$rtt" "${rate_flag[@]}" --seconds "${SECONDS_CHECK:-6}"
fi
dlpid=
cleanup() {
  trap - EXIT INT TERM
  su postgres -c "$pgbin/pg_ctl -D $work/pg -m fast stop" >/dev/null 2>&1 || true
  if [ -n "$dlpid" ]; then kill -TERM "$dlpid" 2>/dev/null || true; wait "$dlpid" 2>/dev/null || true; fi
  [ -n "${ns:-}" ] && ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rm -f "$work/line" "$work/line.err"
"$dl" up --rtt-ms "$rtt" "${rate_flag[@]}" > "$work/line" 2> "$work/line.err" &
dlpid=$!
for _ in $(seq 1 50); do [ -s "$work/line" ] && break; sleep 0.1; done
read -r _ ns _ client _ server _ device < "$work/line" || { cat "$work/line.err" >&2; exit 1; }
# The server, on the far side.
. bench/wan/far-pg.sh  # (the working directory is the repository's root)
far_pg "$work" "$pgbin" "$bin" "$port" "$server"
export URL="postgresql://sluice@$server:$port/postgres?sslmode=disable" NS=$ns
echo "path: client namespace $ns ($client) -> server $server, rtt ${rtt} ms, rate ${rate} Mbit/s (0: unlimited)"
echo "URL=$URL"
case $mode in
  hold) echo "holding; Ctrl-C tears it down"; while kill -0 "$dlpid" 2>/dev/null; do sleep 1; done ;;
  run) ip netns exec "$ns" "$@" ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
