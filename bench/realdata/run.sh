#!/usr/bin/env bash
# Real CSVs nobody here wrote (vega_datasets on PyPI), loaded by sluice and by psql \copy into
# the same table shapes, compared row for row in the server, and timed (interleaved, medians
# of REPEAT, default 3).
#
#   bench/realdata/run.sh     (sluice's private cluster under /tmp/sluice-realdata)
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=/tmp/sluice-realdata/venv
[ -x "$venv/bin/python" ] || { python3 -m venv "$venv"; "$venv/bin/pip" install -q vega_datasets; }
D=$("$venv/bin/python" -c 'import vega_datasets, os; print(os.path.join(os.path.dirname(vega_datasets.__file__), "_data"))')
B=target/release/sluice
[ -x "$B" ] || cargo build --release -p sluice
export SLUICE_PG_DIR=${SLUICE_PG_DIR:-/tmp/sluice-realdata/pg}
"$B" pg start >/dev/null
URL=$("$B" pg url)
q() { psql -X -q -v ON_ERROR_STOP=1 "$URL" -c "$1" 2>&1 | grep -v NOTICE || true; }
declare -A ddl=(
  [la_riots]="first_name text, last_name text, age int, gender text, race text, death_date date, address text, neighborhood text, type text, longitude float8, latitude float8"
  [seattle_weather]="date date, precipitation float8, temp_max float8, temp_min numeric(5,1), wind float4, weather text"
  [airports]="iata text, name text, city text, state text, country text, latitude float8, longitude float8"
  [seattle_temps]="date timestamp, temp float8"
  [stocks]="symbol text, date date, price numeric(10,2)"
  [iowa_electricity]="year date, source text, net_generation int"
  [us_employment]="month date, nonfarm int, private int, goods_producing int, service_providing int, private_service_providing int, mining_and_logging int, construction int, manufacturing int, durable_goods int, nondurable_goods int, trade_transportation_utilties int, wholesale_trade float8, retail_trade float8, transportation_and_warehousing float8, utilities float8, information int, financial_activities int, professional_and_business_services int, education_and_health_services int, leisure_and_hospitality int, other_services int, government int, nonfarm_change int"
)
# Wall seconds of a command, to the millisecond.
timed() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
REPEAT=${REPEAT:-3}
for t in "${!ddl[@]}"; do
  f=$D/${t//_/-}.csv
  # Interleaved: psql's load, then sluice's, into fresh tables, REPEAT times; the last pair
  # is compared row for row; the medians are printed.
  ps=(); ss=()
  for _ in $(seq "$REPEAT"); do
    q "DROP TABLE IF EXISTS s_$t, p_$t; CREATE TABLE s_$t (${ddl[$t]}); CREATE TABLE p_$t (${ddl[$t]})"
    ps+=("$(timed q "\\copy p_$t from '$f' with (format csv, header)")")
    ss+=("$(timed "$B" load -q --target "$URL" --table "s_$t" --header --restart "$f")")
  done
  med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  diff=$(psql -X -At "$URL" -c "SELECT count(*) FROM ((TABLE s_$t EXCEPT ALL TABLE p_$t) UNION ALL (TABLE p_$t EXCEPT ALL TABLE s_$t)) x")
  echo "$t: $(psql -X -At "$URL" -c "SELECT count(*) FROM s_$t") rows, differences from psql: $diff; median s: psql $(med "${ps[@]}"), sluice $(med "${ss[@]}")"
done
