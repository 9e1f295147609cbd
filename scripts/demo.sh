#!/usr/bin/env bash
# From a fresh machine to a loaded, verified TPC-H database in one command:
# builds sluice, installs PostgreSQL's server package if it is missing (saying so), and runs
# `sluice demo` against sluice's private cluster. Extra arguments go to `sluice demo`
# (for example --scale 10 --jobs 8, or --target postgresql://...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-postgres.sh
echo "demo.sh: building sluice in release mode (about 2 minutes the first time on 2 cores; seconds after that)..." >&2
t0=$SECONDS
cargo build --release --quiet
echo "demo.sh: sluice is built (target/release/sluice, $((SECONDS - t0)) s); running: sluice demo $*" >&2
exec target/release/sluice demo "$@"
