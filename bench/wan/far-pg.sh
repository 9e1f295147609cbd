# Sourced by bench/wan/delay.sh and bench/wan/bdp.sh: the PostgreSQL on the far side of a path.
#
#   far_pg WORK PGBIN SLUICE PORT LISTEN
#
# Makes a cluster under WORK/pg once (sluice's bulk settings, trust for the paths' 10.97/16
# addresses, a self-signed certificate) and starts it listening on LISTEN (comma-separated
# addresses) at PORT. With TLS=1 in the environment it starts with ssl = on, so that clients
# may connect with sslmode=require (trust still lets them in either way).
far_pg() {
  local work=$1 pgbin=$2 bin=$3 port=$4 listen=$5 ssl=off
  if [ ! -e "$work/pg/PG_VERSION" ]; then
    rm -rf "$work/pg"; install -d -o postgres "$work/pg"
    su postgres -c "$pgbin/initdb -D $work/pg -U sluice --auth=trust -E UTF8 --locale=C" >/dev/null
    { "$bin" pg settings; echo "port = $port"; echo "unix_socket_directories = ''"; } \
      >> "$work/pg/postgresql.conf"
    echo "host all all 10.97.0.0/16 trust" >> "$work/pg/pg_hba.conf"
  fi
  if [ ! -e "$work/pg/server.crt" ]; then
    openssl req -new -x509 -days 30 -nodes -subj /CN=sluice-bench -newkey rsa:2048 \
      -keyout "$work/pg/server.key" -out "$work/pg/server.crt" 2>/dev/null
    chown postgres "$work/pg/server.key" "$work/pg/server.crt"; chmod 600 "$work/pg/server.key"
  fi
  [ "${TLS:-0}" = 1 ] && ssl=on
  su postgres -c "$pgbin/pg_ctl -D $work/pg -l $work/pg/server.log -o \"-c listen_addresses=$listen -c ssl=$ssl\" -w start" >/dev/null
}
