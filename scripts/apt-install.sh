#!/usr/bin/env bash
# Installs one Debian/Ubuntu package with apt-get (through sudo unless root), for the ensure-*
# scripts. Without apt-get it says what to do instead and fails.
#
#   scripts/apt-install.sh PACKAGE "what to do without apt-get"
set -euo pipefail
package=$1; otherwise=$2
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if ! command -v apt-get >/dev/null; then
  echo "no apt-get here: $otherwise" >&2
  exit 1
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$package" >/dev/null
