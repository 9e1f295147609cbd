#!/usr/bin/env bash
# The project's test command: formatting, lints, and every test against a real PostgreSQL
# (the tests start their own private cluster; nothing needs to be running).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace
