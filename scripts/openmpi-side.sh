# Sourced by scripts/bench-vs-openmpi.sh and scripts/tcp-floor.sh (from the repository root):
# what both need to run Open MPI beside fabcoll. Open MPI is a measuring tool for these scripts
# only, never a dependency of fabcoll.

# openmpi_side NAME PEERS OUT: finds mpibench.c (in PEERS, else ../shared/peers or
# ../../shared/peers), installs Open MPI if missing, installs fabcoll's system packages, builds
# fabrun and fabcoll (unless `prebuilt` names a directory holding them), compiles mpibench into OUT.
# Sets `bin` (fabcoll's release binaries).
openmpi_side() {
  local name=$1 peers=$2 out=$3 d
  if [ -z "$peers" ]; then
    for d in ../shared/peers ../../shared/peers; do
      if [ -f "$d/mpibench.c" ]; then peers=$d; break; fi
    done
  fi
  if [ -z "$peers" ] || [ ! -f "$peers/mpibench.c" ]; then
    echo "$name: mpibench.c not found; pass --peers DIR" >&2
    exit 2
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  if ! command -v mpicc.openmpi >/dev/null || ! command -v mpiexec.openmpi >/dev/null; then
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends openmpi-bin \
      libopenmpi-dev >/dev/null
  fi
  bash scripts/install-deps.sh
  if [ -n "${prebuilt:-}" ]; then
    # A given build (e.g. an A/A check of the method: the same build on both sides).
    bin=$prebuilt
  else
    cargo build --release --bin fabrun --bin fabcoll
    bin="${CARGO_TARGET_DIR:-$(pwd)/target}/release"
  fi
  mkdir -p "$out"
  mpicc.openmpi -O2 "$peers/mpibench.c" -o "$out/mpibench"
}
