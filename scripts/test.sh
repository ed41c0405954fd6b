#!/usr/bin/env bash
# The test command: installs the system packages the build needs, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo test --workspace --release "$@"
