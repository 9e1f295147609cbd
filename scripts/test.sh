#!/usr/bin/env bash
# The project's test command: installs what the tests need and is missing (PostgreSQL's server
# package, MariaDB's server and client, Chromium, rustfmt and clippy), then formatting, lints,
# and every test binary against real PostgreSQL and MariaDB servers (the tests start their own
# private ones; nothing needs to be running).
# Every test binary runs even when one fails (--no-fail-fast), and the last line is the totals
# over all of them, printed whatever the outcome; the exit code is cargo's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-postgres.sh
scripts/ensure-mariadb.sh
scripts/ensure-chromium.sh
scripts/ensure-ping.sh
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  echo "rustfmt or clippy is missing: adding them with rustup" >&2
  rustup component add rustfmt clippy
fi
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
if [ "$status" != 0 ] && ! grep -q '^test result:' "$log"; then
  echo "tests: cargo test failed before any test ran (see above)" >&2
fi
exit "$status"
