#!/usr/bin/env bash
# The project's test command: formatting, lints, and every test against a real PostgreSQL
# (the tests start their own private clusters; nothing needs to be running). Ends with one
# line of totals over all test binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-targets 2>&1 | tee "$log"
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
