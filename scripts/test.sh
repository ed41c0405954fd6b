#!/usr/bin/env bash
# The test command: installs the system packages the build needs, then checks the habits and runs the whole
# test suite. Extra arguments go to the final `cargo test --workspace --profile ci`.
#   1. formatting (rustfmt.toml), 2. clippy on every target with warnings as errors (incl. clippy's
#   `incompatible_msrv`: nothing newer than the workspace's `rust-version`), 3. rustdoc with warnings as errors,
#   4. the lean-library check (scripts/check-lean.sh) and `cargo package` of every crate, 5. the loom models,
#   6. the whole suite in the `ci` profile (release's optimisation with debug assertions and overflow checks on,
#   so every `debug_assert!` runs: Cargo.toml), also without libfabric for fabcoll-fabric, 7. the Python package
#   and its torch backend (scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

step() { echo "== scripts/test.sh: $* ($(date +%T))" >&2; }

step "cargo fmt --check"
cargo fmt --all -- --check

# Dev profile: the dependencies' metadata it builds is what `cargo doc` reuses.
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
# Without libfabric: the `ofi` feature off compiles and stays warning-free too.
cargo clippy -p fabcoll-fabric --no-default-features --all-targets -- -D warnings

step "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --document-private-items

step "lean library, packages"
bash scripts/check-lean.sh
# Every crate packs. Not verified here (unpacking and building the library crates again is a dev build of them
# and their dependencies that no other step shares; docs/measurements/2026-11-28-test-sh.md):
# `cargo package --workspace --exclude fabcoll-cli --offline` does it.
cargo package --workspace --no-verify --offline --allow-dirty --quiet

step "loom models"
bash scripts/loom.sh

step "cargo test --workspace --profile ci"
# The verifier's matrix to p = 64 and its case count, which a build with debug assertions would otherwise shrink to
# the unoptimized build's; above p = 32 the matrix keeps the powers of two, their neighbours and the multiples of 8
# (debug assertions slow the verifier; `cargo test --release` runs it whole).
export VERIFY_MAX_P="${VERIFY_MAX_P:-64}" VERIFY_CASES="${VERIFY_CASES:-400}" VERIFY_SAMPLE_ABOVE="${VERIFY_SAMPLE_ABOVE:-32}"
cargo test -p fabcoll-fabric --no-default-features --lib --profile ci
cargo test --workspace --profile ci "$@"

# The Python package and the torch backend, built in the same profile (it reuses the library built above).
step "python package and torch backend (scripts/test-python.sh)"
CARGO_PROFILE=ci FABRUN="${CARGO_TARGET_DIR:-target}/ci/fabrun" bash scripts/test-python.sh
