#!/usr/bin/env bash
# Several source hosts, one load: each host a network namespace of its own, joined to the
# server's (this one) by a veth pair whose two ends are shaped with `tbf` (this kernel has tbf,
# no netem). A PostgreSQL 15 server of the bench's own listens on the server end of every
# pair. SF0.5 lineitem (sluice gen tpch, 3 parts) is copied to a host-local path per host, and
# loaded, interleaved, ROUNDS times each way:
#   crew-1, crew-2, crew-3   sluice load --job --workers N: the 3 parts split across N hosts,
#                            one worker per host, --jobs 2 each (one coordinated job)
#   crew-3-stage             crew-3 with --strategy stage (needs PARTITIONED=1): each host
#                            stages its part, the last worker's hand-over switches all in
#   separate-3               3 separate `sluice load --jobs 2`, one per host, at once (no job)
#   psql-3                   3 psql \copy at once, one per host (copies with the trailing `|`
#                            stripped, untimed)
#   unshaped                 one sluice load --jobs 2 of all 3 parts over loopback
# Each after a TRUNCATE, timed to the end of the last process. Prints each worker's verdict
# (from `sluice jobs --json`) for the crews. Needs root, ip, tc.
#
#   bench/hosts/run.sh [RATE] [ROUNDS]       (defaults: 200mbit, 3)
# Environment: WIRE=auto|binary|text (every sluice run's --wire; default auto), WAYS="crew-3
# separate-3" (a subset of the ways, in that order), PARTITIONED=1 (lineitem in 3 partitions,
# one a part, for every way).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
rate=${1:-200mbit}; rounds=${2:-3}
[ "$(id -u)" = 0 ] || { echo "bench/hosts/run.sh needs root (network namespaces, tc)" >&2; exit 2; }
bin=$PWD/target/release/sluice
[ -x "$bin" ] || cargo build --release -p sluice
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
work=/tmp/sluice-hosts
data=$work/sf05
port=5478
mkdir -p "$work"
if [ ! -e "$data/lineitem/lineitem.3.tbl" ]; then
  "$bin" gen tpch -q --scale 0.5 --parts 3 --out "$data" --tables lineitem
fi
for k in 1 2 3; do
  mkdir -p "$work/host$k"
  [ -e "$work/host$k/lineitem.$k.tbl" ] || cp "$data/lineitem/lineitem.$k.tbl" "$work/host$k/"
  [ -e "$work/host$k/stripped.tbl" ] || sed 's/|$//' "$data/lineitem/lineitem.$k.tbl" > "$work/host$k/stripped.tbl"
done
cleanup() {
  su postgres -c "$pgbin/pg_ctl -D $work/pg -m fast stop" >/dev/null 2>&1 || true
  for k in 1 2 3; do
    ip netns del "sluice-host$k" 2>/dev/null || true
    ip link del "sh$k-server" 2>/dev/null || true
  done
}
trap cleanup EXIT
cleanup
# The hosts' links.
listen=127.0.0.1
for k in 1 2 3; do
  ns=sluice-host$k
  ip netns add "$ns"
  ip link add "sh$k-server" type veth peer name "sh$k-host"
  ip link set "sh$k-host" netns "$ns"
  ip addr add "10.98.$k.1/24" dev "sh$k-server" && ip link set "sh$k-server" up
  ip netns exec "$ns" ip addr add "10.98.$k.2/24" dev "sh$k-host"
  ip netns exec "$ns" ip link set "sh$k-host" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" tc qdisc add dev "sh$k-host" root tbf rate "$rate" burst 256kb latency 50ms
  tc qdisc add dev "sh$k-server" root tbf rate "$rate" burst 256kb latency 50ms
  listen="$listen,10.98.$k.1"
done
# The server.
if [ ! -e "$work/pg/PG_VERSION" ]; then
  rm -rf "$work/pg"; install -d -o postgres "$work/pg"
  su postgres -c "$pgbin/initdb -D $work/pg -U sluice --auth=trust -E UTF8 --locale=C" >/dev/null
  { "$bin" pg settings; echo "port = $port"; echo "unix_socket_directories = ''";
    echo "max_prepared_transactions = 64"; } >> "$work/pg/postgresql.conf"
  echo "host all all 10.98.0.0/16 trust" >> "$work/pg/pg_hba.conf"
fi
su postgres -c "$pgbin/pg_ctl -D $work/pg -l $work/pg/server.log -o \"-c listen_addresses=$listen\" -w start" >/dev/null
url() { echo "postgresql://sluice@$1:$port/postgres?sslmode=disable"; }
local_url=$(url 127.0.0.1)
on() { local k=$1; shift; ip netns exec "sluice-host$k" "$@"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 "$local_url" -c "$1" >/dev/null; }
ddl=()
[ "${PARTITIONED:-0}" = 1 ] && ddl=(--partitions 3 --scale 0.5)
"$bin" ddl tpch --create --replace --target "$local_url" "${ddl[@]}" >/dev/null
# crew N: which parts host k loads (round robin over N hosts).
parts_of() { local n=$1 k=$2 p; for p in 1 2 3; do [ $(( (p - 1) % n + 1 )) = "$k" ] && echo -n "$work/host$k/lineitem.$p.tbl "; done; true; }
# Host k sees every part under its own path (the bench copies the parts to each host as needed).
for k in 1 2 3; do for p in 1 2 3; do
  [ -e "$work/host$k/lineitem.$p.tbl" ] || ln "$work/host$p/lineitem.$p.tbl" "$work/host$k/lineitem.$p.tbl"
done; done
declare -A times
ways=${WAYS:-crew-1 crew-2 crew-3 separate-3 psql-3 unshaped}
wire=${WIRE:-auto}
for r in $(seq 1 "$rounds"); do
  for who in $ways; do
    sql "TRUNCATE lineitem"; sql "SET client_min_messages = warning; DROP SCHEMA IF EXISTS sluice_ledger CASCADE"; sql "CHECKPOINT"
    t0=$(date +%s.%N)
    case $who in
      crew-*) n=${who#crew-}; n=${n%-stage}; strategy=auto
        [[ $who == *-stage ]] && strategy=stage
        for k in $(seq 1 "$n"); do
          # shellcheck disable=SC2046
          on "$k" "$bin" load -q --target "$(url 10.98.$k.1)" --jobs 2 --wire "$wire" --job "bench-$r-$who" \
            --strategy "$strategy" --workers "$n" --worker "$k" $(parts_of "$n" "$k") > "$work/$who.$k.out" 2>&1 &
        done
        wait ;;
      separate-3) for k in 1 2 3; do
          on "$k" "$bin" load -q --target "$(url 10.98.$k.1)" --jobs 2 --wire "$wire" --strategy direct \
            "$work/host$k/lineitem.$k.tbl" > "$work/$who.$k.out" 2>&1 &
        done
        wait ;;
      psql-3) for k in 1 2 3; do
          on "$k" psql -X -q -v ON_ERROR_STOP=1 "$(url 10.98.$k.1)" \
            -c "\\copy lineitem from '$work/host$k/stripped.tbl' with (delimiter '|')" &
        done
        wait ;;
      unshaped) "$bin" load -q --target "$local_url" --jobs 2 --wire "$wire" --strategy direct \
          "$data"/lineitem/*.tbl > "$work/$who.out" 2>&1 ;;
    esac
    t=$(since "$t0")
    rows=$(psql -X -At "$local_url" -c "select count(*) from lineitem")
    extra=
    if [[ $who == crew-* ]]; then
      extra=$("$bin" jobs --json --target "$local_url" | python3 -c '
import json, sys
for j in json.load(sys.stdin)[:1]:
    print(" ".join("w%d:%s:%.1fMB/s:%s" % (w["worker"], w["state"], w["bytes"] / max(w["seconds"], 1e-9) / 1e6, w["verdict"]) for w in j.get("workers", [])))')
    fi
    echo "round $r $who ${t}s ($rows rows) $extra"
    times[$who]="${times[$who]:-} $t"
  done
done
medians $ways
