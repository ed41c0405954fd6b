#!/usr/bin/env bash
# Is a tuned decision file faster than the embedded defaults on this machine? Runs
# `fabcoll tune --compare FILE` (the defaults' choice and the file's, measured alternately over
# --rounds rounds at every grid size, as the tuner measures) for each process count, and keeps
# the tables. Per size: tuned/default (median over rounds); the noise band is the 5th–95th
# percentile of that ratio where both choose the same algorithm and parameters; a different
# choice is FASTER below the band, SLOWER above it, else within noise.
#
#   scripts/tune-vs-defaults.sh --file decisions.json [options]
#     --file FILE        the tuned decision file (required; `fabcoll tune --out FILE`)
#     --procs "LIST"     process counts (default: "2 4")
#     --fabric F         fabric (default: shm)
#     --ops LIST         comma-separated (default: allreduce,bcast,allgather,alltoall)
#     --max-size BYTES   largest grid size (default: 64M)
#     --rounds N         alternating rounds per size (default: 4)
#     --out DIR          tables (default: target/tune-vs-defaults)
#
# Timings drift on shared machines: run it when nothing else measures (e.g. under
# `flock bench.lock`), and compare only within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

file="" procs="2 4" fabric=shm ops=allreduce,bcast,allgather,alltoall max=64M rounds=4
out="$root/target/tune-vs-defaults"
while [ $# -gt 0 ]; do
  case "$1" in
    --file) file=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --fabric) fabric=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --max-size) max=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "tune-vs-defaults: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$file" ] || [ ! -f "$file" ]; then
  echo "tune-vs-defaults: --file FILE (a decision file) is required" >&2
  exit 2
fi
file=$(cd "$(dirname "$file")" && pwd)/$(basename "$file")

cargo build --release --bin fabrun --bin fabcoll
bin="${CARGO_TARGET_DIR:-$root/target}/release"
mkdir -p "$out"
for p in $procs; do
  table="$out/compare-$fabric-p$p.txt"
  start=$(date +%s)
  timeout 1800 "$bin/fabrun" -n "$p" --fabric "$fabric" --timeout 1750 "$bin/fabcoll" tune --compare "$file" \
    --ops "$ops" --max-size "$max" --rounds "$rounds" | sed 's/^\[0\] //' > "$table"
  echo "p=$p: $(( $(date +%s) - start )) s, $table"
  grep '^# p=' "$table"
done
