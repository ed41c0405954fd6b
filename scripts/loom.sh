#!/usr/bin/env bash
# Model-checks fabcoll-fabric's lock-free shared-memory protocols with loom: every `loom_*` test
# (shm::queue, shm::keys, shm::mailbox and its planted-bug check), built with `--cfg loom` in
# release, in a target directory of its own (`$CARGO_TARGET_DIR/loom`) so that the normal build
# stays valid. Fails if a model fails, if none ran, or if the models run past LOOM_TIMEOUT seconds
# (default 600; the build is not counted).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
args=(-p fabcoll-fabric --release --lib)
cargo test "${args[@]}" --no-run
log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout "${LOOM_TIMEOUT:-600}" cargo test "${args[@]}" loom_ 2>&1 | tee "$log"
if ! grep -Eq 'test result: ok\. [1-9][0-9]* passed' "$log"; then
  echo "loom.sh: no loom model ran" >&2
  exit 1
fi
