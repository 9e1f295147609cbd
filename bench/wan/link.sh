#!/usr/bin/env bash
# A link-bound load, for real: the client in a network namespace of its own, joined to the
# server's by a veth pair whose client end is shaped with `tbf` (this kernel has tbf, no
# netem). A PostgreSQL 15 server of the bench's own listens on the server end. SF1 lineitem
# (sluice gen tpch, 8 parts) goes across, four ways, interleaved, ROUNDS times each:
#   auto     sluice load --jobs 2 (--wire auto: it measures the path and chooses)
#   binary   sluice load --wire binary --jobs 2
#   text     sluice load --wire text --jobs 2
#   psql-4   psql \copy, 4 files at a time (copies with the trailing `|` stripped, untimed)
# Each after a TRUNCATE, timed to the end of the load. Needs root, ip, tc.
#
#   bench/wan/link.sh [RATE] [ROUNDS]       (defaults: 200mbit, 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
rate=${1:-200mbit}; rounds=${2:-3}
[ "$(id -u)" = 0 ] || { echo "bench/wan/link.sh needs root (network namespaces, tc)" >&2; exit 2; }
bin=$PWD/target/release/sluice
[ -x "$bin" ] || cargo build --release -p sluice
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
work=/tmp/sluice-wan
ns=sluice-wan
data=$work/sf1
mkdir -p "$work"
if [ ! -e "$data/lineitem/lineitem.8.tbl" ]; then
  "$bin" gen tpch -q --scale 1 --parts 8 --out "$data" --tables lineitem
fi
mkdir -p "$work/stripped"
for f in "$data"/lineitem/*.tbl; do
  s=$work/stripped/$(basename "$f")
  [ -e "$s" ] || sed 's/|$//' "$f" > "$s"
done
cleanup() {
  su postgres -c "$pgbin/pg_ctl -D $work/pg -m fast stop" >/dev/null 2>&1 || true
  ip netns del "$ns" 2>/dev/null || true
  ip link del sw-host 2>/dev/null || true
}
trap cleanup EXIT
cleanup
# The link.
ip netns add "$ns"
ip link add sw-host type veth peer name sw-client
ip link set sw-client netns "$ns"
ip addr add 10.99.0.1/24 dev sw-host && ip link set sw-host up
ip netns exec "$ns" ip addr add 10.99.0.2/24 dev sw-client
ip netns exec "$ns" ip link set sw-client up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" tc qdisc add dev sw-client root tbf rate "$rate" burst 256kb latency 50ms
tc qdisc add dev sw-host root tbf rate "$rate" burst 256kb latency 50ms
# The server.
if [ ! -e "$work/pg/PG_VERSION" ]; then
  rm -rf "$work/pg"; install -d -o postgres "$work/pg"
  su postgres -c "$pgbin/initdb -D $work/pg -U sluice --auth=trust -E UTF8 --locale=C" >/dev/null
  { "$bin" pg settings; echo "listen_addresses = '10.99.0.1'"; echo "port = 5477";
    echo "unix_socket_directories = ''"; } >> "$work/pg/postgresql.conf"
  echo "host all all 10.99.0.0/24 trust" >> "$work/pg/pg_hba.conf"
fi
su postgres -c "$pgbin/pg_ctl -D $work/pg -l $work/pg/server.log -w start" >/dev/null
url=postgresql://sluice@10.99.0.1:5477/postgres?sslmode=disable
client() { ip netns exec "$ns" "$@"; }
sql() { client psql -X -q -v ON_ERROR_STOP=1 "$url" -c "$1" >/dev/null; }
"$bin" ddl tpch --create --replace --target "$url" >/dev/null
declare -A times
for r in $(seq 1 "$rounds"); do
  for who in auto binary text psql-4; do
    sql "TRUNCATE lineitem"; sql "DROP SCHEMA IF EXISTS sluice_ledger CASCADE"; sql "CHECKPOINT"
    t0=$(date +%s.%N)
    case $who in
      auto|binary|text) client "$bin" load -q --target "$url" --jobs 2 --wire "$who" \
          --strategy direct "$data"/lineitem/*.tbl > "$work/$who.out" ;;
      psql-4) ls "$work"/stripped/*.tbl | client xargs -P 4 -I{} \
          psql -X -q -v ON_ERROR_STOP=1 "$url" -c "\\copy lineitem from '{}' with (delimiter '|')" ;;
    esac
    t=$(since "$t0")
    rows=$(client psql -X -At "$url" -c "select count(*) from lineitem")
    echo "round $r $who ${t}s ($rows rows)"
    times[$who]="${times[$who]:-} $t"
  done
done
medians auto binary text psql-4
for who in auto binary text; do echo "$who:"; grep -h "^wire:\|verdict" "$work/$who.out"; done
