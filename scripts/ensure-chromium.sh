#!/usr/bin/env bash
# Installs Chromium when no headless-capable browser is found (Debian/Ubuntu: apt-get): the
# HTML report's test renders the page in a real browser. SLUICE_CHROMIUM names one to use.
set -euo pipefail
if [ -n "${SLUICE_CHROMIUM:-}" ] && [ -x "$SLUICE_CHROMIUM" ]; then exit 0; fi
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null; then exit 0; fi
done
echo "Chromium is missing (the HTML report's test renders it headless): installing the chromium package with apt-get" >&2
"$(dirname "$0")/apt-install.sh" chromium \
  "install Chromium yourself, or name a browser with SLUICE_CHROMIUM"
