#!/usr/bin/env bash
# The run command: installs the system packages the build needs, builds the release binaries and
# runs a 4-rank allreduce benchmark (8 B … 16 MiB, OSU method, result checked) through fabrun on
# the default fabric (shm on one machine). Extra arguments go to `fabcoll bench`, e.g.
#   scripts/run.sh --op bcast --format csv
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --bin fabrun --bin fabcoll
target="${CARGO_TARGET_DIR:-target}/release"
exec "$target/fabrun" -n 4 --timeout 600 "$target/fabcoll" bench --op allreduce --min-size 8 --max-size 16M \
  --check "$@"
