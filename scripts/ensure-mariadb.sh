#!/usr/bin/env bash
# Installs MariaDB's server and client (Debian/Ubuntu: apt-get) when `mariadbd` or
# `mariadb-install-db` is missing. The tests start their own private server in a temp dir
# (crates/sluice/tests/common/mariadb.rs): nothing needs to be running, and the package's own
# service is left stopped.
set -euo pipefail
have_server() {
  { command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ]; } &&
    command -v mariadb-install-db >/dev/null && command -v mariadb >/dev/null
}
if have_server; then exit 0; fi
echo "MariaDB's server or client is missing: installing mariadb-server and mariadb-client with apt-get" >&2
# The package's maintainer scripts try to start a service; there is none to start in a container
# and the tests do not want one: policy-rc.d answers "not now" (101) for the install only.
policy=/usr/sbin/policy-rc.d
made_policy=""
if [ "$(id -u)" = 0 ] && [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
fi
cleanup() { if [ -n "$made_policy" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
here=$(dirname "$0")
"$here/apt-install.sh" mariadb-server \
  "install MariaDB's server package (mariadbd, mariadb-install-db) yourself"
"$here/apt-install.sh" mariadb-client "install MariaDB's client package (mariadb) yourself"
