#!/usr/bin/env bash
# Point-to-point latency and bandwidth, fabcoll against Open MPI in the same run: `fabcoll pingpong`
# (tagged send/recv) and scripts/mpi-pingpong.c (MPI_Send/MPI_Recv), ranks 0 and 1, alternating which
# goes first, several runs. shm is compared with Open MPI's vader BTL, tcp with its tcp BTL.
#   scripts/bench-p2p.sh [--fabrics "shm tcp"] [--runs 3] [--min 8] [--max 4194304] [--rounds 5] [--out DIR]
# Prints per (fabric, bytes) the medians over runs of both and the median of the per-run ratios
# fabcoll / Open MPI, with the runs fabcoll was ahead in; raw figures in OUT/raw.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
fabrics="shm tcp" runs=3 min=8 max=4194304 rounds=5 out=target/bench-p2p peers=""
while [ $# -gt 0 ]; do
  case "$1" in
    --fabrics) fabrics=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "bench-p2p: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
. scripts/openmpi-side.sh
openmpi_side bench-p2p "$peers" "$out"
mpicc.openmpi -O2 scripts/mpi-pingpong.c -o "$out/mpi-pingpong"
ompi=(mpiexec.openmpi --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo -n 2)
raw="$out/raw.csv"
echo "run,impl,fabric,bytes,usec" >"$raw"

fabcoll_side() { # run fabric
  timeout 600 "$bin/fabrun" -n 2 --fabric "$2" --timeout 550 "$bin/fabcoll" pingpong --min "$min" --max "$max" \
    --rounds "$rounds" | sed 's/^\[[0-9]*\] //' | awk -v run="$1" -v f="$2" '/^ *[0-9]+ / { printf "%s,fabcoll,%s,%s,%s\n", run, f, $1, $2 }' >>"$raw"
}
mpi_side() { # run fabric
  local mca=(--mca pml ob1 --mca btl vader,self)
  [ "$2" != shm ] && mca=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
  timeout 600 "${ompi[@]}" "${mca[@]}" "$out/mpi-pingpong" "$min" "$max" "$rounds" |
    awk -v run="$1" -v f="$2" '/^ *[0-9]+ / { printf "%s,openmpi,%s,%s,%s\n", run, f, $1, $2 }' >>"$raw"
}

for run in $(seq "$runs"); do
  for f in $fabrics; do
    echo "run $run: $f" >&2
    if [ $((run % 2)) = 1 ]; then fabcoll_side "$run" "$f"; mpi_side "$run" "$f"; else mpi_side "$run" "$f"; fabcoll_side "$run" "$f"; fi
  done
done

# Per (fabric, bytes): median of each side over runs, median of the per-run ratios, runs ahead.
python3 - "$raw" <<'PY'
import csv, statistics, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
t = defaultdict(dict)
for r in rows:
    t[(r["fabric"], int(r["bytes"]))].setdefault(r["run"], {})[r["impl"]] = float(r["usec"])
print(f"{'fabric':>6} {'bytes':>9} {'fabcoll_us':>10} {'openmpi_us':>10} {'ratio':>6} ahead")
for (f, b), runs in sorted(t.items()):
    pairs = [(v["fabcoll"], v["openmpi"]) for v in runs.values() if "fabcoll" in v and "openmpi" in v]
    if not pairs:
        continue
    ratios = [x / y for x, y in pairs]
    ahead = sum(x < y for x, y in pairs)
    print(f"{f:>6} {b:>9} {statistics.median(x for x, _ in pairs):>10.2f} {statistics.median(y for _, y in pairs):>10.2f}"
          f" {statistics.median(ratios):>6.2f} {ahead}/{len(pairs)}")
PY
