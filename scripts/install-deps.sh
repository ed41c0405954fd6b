#!/usr/bin/env bash
# Installs the system packages fabcoll needs to build and test on a fresh Debian machine:
#   libfabric-dev + pkg-config   the ofi backend (headers and libfabric.so found by pkg-config)
#   libclang-dev                 bindgen generates the libfabric bindings at build time
#   libfabric-bin                fi_pingpong / fi_info, the raw-provider baseline of the fabric benches
#   iproute2                     network namespaces for multi-"host" tests
# Idempotent: does nothing when everything is already there.
set -euo pipefail
pkgs=(libfabric-dev libfabric-bin libclang-dev pkg-config clang iproute2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
