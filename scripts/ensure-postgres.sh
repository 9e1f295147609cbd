#!/usr/bin/env bash
# Installs PostgreSQL's server binaries when none are found (Debian/Ubuntu: apt-get).
set -euo pipefail
if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then exit 0; fi
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi
if command -v initdb >/dev/null; then exit 0; fi
echo "PostgreSQL's server binaries are missing: installing the postgresql package with apt-get" >&2
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if ! command -v apt-get >/dev/null; then
  echo "no apt-get here: install PostgreSQL's server package (initdb, pg_ctl, postgres) yourself" >&2
  exit 1
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
