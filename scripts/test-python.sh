#!/usr/bin/env bash
# The Python package's tests: makes sure the virtualenv is there and the package built into it
# (scripts/python-env.sh: reused between runs and clones), builds `fabrun` for the launcher test (both in
# `CARGO_PROFILE`, default release), then runs
# python/tests with pytest. Every multi-process job there has a hard timeout (120 s, python/tests/conftest.py),
# and the whole pytest run one more (600 s). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
venv=$(bash scripts/python-env.sh | tail -n 1)
t1=$(date +%s)
# FABRUN, when set, names a launcher already built (scripts/test.sh: the one `cargo test` built).
if [ -z "${FABRUN:-}" ]; then
  profile=${CARGO_PROFILE:-release}
  cargo build --profile "$profile" -q --bin fabrun
  target=${CARGO_TARGET_DIR:-target}
  # Cargo's directory of the profile: `dev` builds into target/debug, any other into target/<profile>.
  dir=$profile
  [ "$profile" = dev ] && dir=debug
  export FABRUN="$target/$dir/fabrun"
fi
t2=$(date +%s)
timeout 600 "$venv/bin/python" -m pytest -q python/tests "$@"
t3=$(date +%s)
echo "== test-python: venv and package $((t1 - t0)) s, fabrun $((t2 - t1)) s, pytest $((t3 - t2)) s" >&2
