#!/bin/bash
# Interleaved: sluice (new) in db sluice, base in db basedb, psql in db sluice; each ledger holds an earlier finished job of other files.
P=/usr/lib/postgresql/15/bin/psql; D=/tmp/sluice-small-data
url() { echo "postgresql://sluice@127.0.0.1:33701/$1?sslmode=disable"; }
Q() { local db=$1; shift; $P -X -q -v ON_ERROR_STOP=1 -d "$(url $db)" "$@"; }
declare -A DB=([new]=sluice [base]=basedb [psql]=sluice)
declare -A BIN=([new]=/tmp/ab/sluice-new [base]=/tmp/ab/sluice-base)
for w in new base; do
  db=${DB[$w]}
  Q $db -c "DROP TABLE IF EXISTS t, other" -c "CREATE TABLE t (id bigint, name text, v int)" -c "CREATE TABLE other (id bigint, name text, v int)" -c "DROP SCHEMA IF EXISTS sluice_ledger CASCADE" 2>/dev/null
  ${BIN[$w]} load -q --jobs 2 -t "$(url $db)" --table other "$D/tiny/f00*.csv" >/dev/null
done
prep() { local db=$1; for x in job_chunk_runs job_file_runs job_chunks job_files job_places job_commits; do Q $db -c "DELETE FROM sluice_ledger.$x WHERE job <> 1" >/dev/null 2>&1; done; Q $db -c "DELETE FROM sluice_ledger.jobs WHERE id <> 1" -c "TRUNCATE t" -c CHECKPOINT >/dev/null 2>&1; }
go() { local w=$1 db=${DB[$1]}; if [ $w = psql ]; then find "$D/csv" -type f -print0 | sort -z | xargs -0 cat | Q $db -c "\\copy t from stdin with (format csv)"; else ${BIN[$w]} load -q --jobs 2 -t "$(url $db)" --table t "$D/csv/*.csv" >/dev/null; fi; }
run() { local db=${DB[$1]}; prep $db; s=$(date +%s.%N); go $1; e=$(date +%s.%N); n=$(Q $db -At -c "SELECT count(*) FROM t"); [ "$n" = 500000 ] || { echo "bad count $n for $1" >&2; exit 1; }; echo -e "csv\t$1\t$(echo "$e - $s" | bc)"; }
for w in new base psql; do run $w >/dev/null; done
for r in $(seq $1); do if [ $((r%2)) = 1 ]; then o="new base psql"; else o="psql base new"; fi; for w in $o; do run $w; done; done
