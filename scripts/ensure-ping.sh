#!/usr/bin/env bash
# Installs ping (iputils-ping) when missing: the delay line's proof (bench/wan/delayline)
# checks with ping that the path shows the configured round trip.
set -euo pipefail
if command -v ping >/dev/null; then exit 0; fi
echo "ping is missing (the delay line's proof uses it): installing iputils-ping with apt-get" >&2
"$(dirname "$0")/apt-install.sh" iputils-ping "install ping (iputils) yourself"
