#!/usr/bin/env bash
# Creates (or reuses) the virtualenv of the Python package and its tests, then builds `fabcoll` (python/) into it
# with maturin in release. The venv lives outside the clone, keyed by a hash of the pins below, so CI's fresh clones
# reuse it: `${FABCOLL_VENV:-$HOME/.cache/fabcoll/venv-<hash>}`. Prints the venv's path on its last line.
#   PINS        exact versions; torch from its CPU-only index when reachable (no CUDA libraries), else the default
#   --no-build  only make sure the venv and its pins are there
#   CARGO_PROFILE  the cargo profile the package is built in (default release; scripts/test.sh: ci, sharing the
#                  library built for the Rust tests)
# The wheel links the system libfabric: built for this machine (auditwheel skipped), not for redistribution.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
PINS=(torch==2.15.0 numpy==2.4.6 maturin==1.16.0 pytest==9.2.0)
PYTHON=${PYTHON:-python3}
hash=$(printf '%s\n' "${PINS[@]}" "$($PYTHON -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-12)
VENV=${FABCOLL_VENV:-$HOME/.cache/fabcoll/venv-$hash}
say() { echo "== python-env: $* ($(( $(date +%s) - t0 )) s)" >&2; }

# The venv module (Debian splits it into python3-venv).
if ! $PYTHON -c 'import venv, ensurepip' 2>/dev/null; then
  say "installing python3-venv"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv python3-dev >/dev/null
fi

if [ ! -f "$VENV/.pins-ok" ]; then
  say "creating $VENV"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  $PYTHON -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # The CPU-only torch wheels (no CUDA libraries: a few hundred MB instead of several GB) when their index answers.
  pins=("${PINS[@]}")
  cpu_index=https://download.pytorch.org/whl/cpu
  extra=()
  if "$VENV/bin/pip" download -q --no-deps --timeout 5 --retries 0 -d "$VENV/.probe" --index-url "$cpu_index" \
      "${PINS[0]}+cpu" >/dev/null 2>&1; then
    pins[0]="${PINS[0]}+cpu"
    extra=(--extra-index-url "$cpu_index")
    say "torch from the CPU-only index"
  else
    say "torch from the default index (the CPU-only one is not reachable)"
  fi
  rm -rf "$VENV/.probe"
  "$VENV/bin/pip" install -q "${extra[@]}" "${pins[@]}"
  touch "$VENV/.pins-ok"
  say "venv ready"
else
  say "reusing $VENV"
fi

if [ "${1:-}" != "--no-build" ]; then
  profile=${CARGO_PROFILE:-release}
  say "building the package (maturin, profile $profile)"
  out=$(mktemp -d)
  VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" maturin build --profile "$profile" -q --auditwheel skip \
    -m python/Cargo.toml -o "$out" >&2
  "$VENV/bin/pip" install -q --force-reinstall --no-deps "$out"/*.whl
  rm -rf "$out"
  say "installed"
fi
echo "$VENV"
