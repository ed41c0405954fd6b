#!/usr/bin/env bash
# Latency under CPU contention (issue 37.3): allreduce at p = 2 while a busy loop pinned to CPU 0
# competes with the ranks, fabcoll beside Open MPI in the same runs, alternating.
#
#   scripts/bench-contention.sh [options]
#     --fabrics "LIST"   fabcoll fabrics (default "shm tcp ofi:tcp ofi:shm"): shm and ofi:shm beside
#                        Open MPI's vader BTL, tcp and ofi:tcp beside its tcp BTL on lo
#     --sizes "LIST"     bytes per rank (default "8 4096 65536 262144 524288")
#     --op OP            collective (default allreduce)
#     --runs N           repetitions; medians over them (default 3)
#     --quiet            no competing load (the same table, for the quiet figures)
#     --baseline DIR     also run the fabrun and fabcoll in DIR (e.g. the build before a fix) in
#                        every run, as `baseline`
#     --build DIR        measure the fabrun and fabcoll in DIR instead of building this tree
#     --out DIR          results (default target/bench-contention)
#
# Each cell: warm-up, then back-to-back calls each timed on its own (fabcoll bench --sync none's
# per-call pass; scripts/mpi-percentiles.c for Open MPI), 1000 calls up to 8 KiB, 200 above;
# p50 and p99 over both ranks' calls, and the mean. Writes OUT/raw.csv
# (run,impl,fabric,bytes,avg_us,p50_us,p99_us) and OUT/summary.md (medians over the runs).
set -euo pipefail
cd "$(dirname "$0")/.."

fabrics="shm tcp ofi:tcp ofi:shm" sizes="8 4096 65536 262144 524288" op=allreduce runs=3 load=1
out="$(pwd)/target/bench-contention" base="" prebuilt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --fabrics) fabrics=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --quiet) load=0; shift ;;
    --baseline) base=$2; shift 2 ;;
    --build) prebuilt=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "bench-contention: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
. scripts/openmpi-side.sh
openmpi_side bench-contention "" "$out"
mpicc.openmpi -O2 scripts/mpi-percentiles.c -o "$out/mpi-percentiles"
ompi=(mpiexec.openmpi --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1)

hog=""
cleanup() { [ -n "$hog" ] && kill "$hog" 2>/dev/null || true; }
trap cleanup EXIT
if [ "$load" = 1 ]; then
  taskset -c 0 bash -c 'while :; do :; done' &
  hog=$!
fi

raw="$out/raw.csv"
echo "run,impl,fabric,bytes,avg_us,p50_us,p99_us" >"$raw"

run_fabcoll() { # run fabric bytes bin impl
  local iters=200
  [ "$3" -le 8192 ] && iters=1000
  if ! timeout 300 "$4/fabrun" -n 2 --fabric "$2" --timeout 250 "$4/fabcoll" bench --op "$op" --min-size "$3" \
      --max-size "$3" --iters "$iters" --warmup $((iters / 10 + 1)) --large-size 1G --sync none --format csv \
      --output "$out/f.csv" >"$out/f.log" 2>&1; then
    echo "$5 $2 $3 failed:" >&2
    tail -5 "$out/f.log" >&2
    return
  fi
  awk -F, -v run="$1" -v impl="$5" -v f="$2" 'NR > 1 { printf "%s,%s,%s,%s,%s,%s,%s\n", run, impl, f, $5, $9, $12, $13 }' \
    "$out/f.csv" >>"$raw"
}

run_ompi() { # run fabric bytes
  local iters=200 btl=(--mca btl vader,self)
  [ "$3" -le 8192 ] && iters=1000
  case "$2" in tcp|ofi:tcp) btl=(--mca btl tcp,self --mca btl_tcp_if_include lo) ;; esac
  if ! timeout 300 "${ompi[@]}" "${btl[@]}" -n 2 "$out/mpi-percentiles" "$op" "$3" "$iters" >"$out/m.log" 2>&1; then
    echo "openmpi $2 $3 failed:" >&2
    tail -5 "$out/m.log" >&2
    return
  fi
  awk -v run="$1" -v f="$2" '/^[0-9]+ [0-9.]+ [0-9.]+ [0-9.]+$/ { printf "%s,openmpi,%s,%s,%s,%s,%s\n", run, f, $1, $2, $3, $4 }' \
    "$out/m.log" >>"$raw"
}

for run in $(seq "$runs"); do
  for fabric in $fabrics; do
    for bytes in $sizes; do
      echo "run $run: $fabric $bytes B" >&2
      # Alternate who goes first, so drift does not favour one side.
      if [ $((run % 2)) = 1 ]; then
        run_fabcoll "$run" "$fabric" "$bytes" "$bin" fabcoll
        [ -n "$base" ] && run_fabcoll "$run" "$fabric" "$bytes" "$base" baseline
        run_ompi "$run" "$fabric" "$bytes"
      else
        run_ompi "$run" "$fabric" "$bytes"
        [ -n "$base" ] && run_fabcoll "$run" "$fabric" "$bytes" "$base" baseline
        run_fabcoll "$run" "$fabric" "$bytes" "$bin" fabcoll
      fi
    done
  done
done

# Medians over the runs per (fabric, bytes, impl), one row per (fabric, bytes).
{
  echo "# $op at p = 2, $([ "$load" = 1 ] && echo "beside a busy loop pinned to CPU 0" || echo "quiet"), medians of $runs runs (µs)"
  echo
  echo "| fabric | bytes | impl | mean | p50 | p99 |"
  echo "|---|---|---|---|---|---|"
  tail -n +2 "$raw" | sort -t, -k3,3 -k4,4n -k2,2 | awk -F, '
    function med(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function flush() { if (n) printf "| %s | %s | %s | %.1f | %.1f | %.1f |\n", f, b, im, med(A, n), med(P, n), med(Q, n) }
    { k = $3 "," $4 "," $2; if (k != key) { flush(); key = k; n = 0; f = $3; b = $4; im = $2 }
      n++; A[n] = $5 + 0; P[n] = $6 + 0; Q[n] = $7 + 0 }
    END { flush() }'
} >"$out/summary.md"
cat "$out/summary.md"
