#!/usr/bin/env bash
# Installs PostgreSQL's server binaries when none are found (Debian/Ubuntu: apt-get), and, as
# root, the `postgres` user the tests run the server as (PostgreSQL refuses to run as root).
set -euo pipefail
ensure_postgres_user() {
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "running as root: adding the system user postgres to run the tests' servers" >&2
    useradd --system --home-dir /var/lib/postgresql postgres
  fi
}
have_server() {
  if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then return 0; fi
  if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then return 0; fi
  command -v initdb >/dev/null
}
if have_server; then ensure_postgres_user; exit 0; fi
echo "PostgreSQL's server binaries are missing: installing the postgresql package with apt-get" >&2
"$(dirname "$0")/apt-install.sh" postgresql \
  "install PostgreSQL's server package (initdb, pg_ctl, postgres) yourself"
ensure_postgres_user
