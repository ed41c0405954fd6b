#!/usr/bin/env bash
# Side-by-side latency of fabcoll and Open MPI on this machine, measured in the same run and
# alternating (absolute times drift a lot on shared machines; only same-run medians compare).
#
#   scripts/bench-vs-openmpi.sh [options]
#     --peers DIR        directory holding mpibench.c (default: ../shared/peers or ../../shared/peers)
#     --ops "LIST"       collectives (default: "allreduce bcast allgather alltoall")
#     --procs "LIST"     process counts (default: "2 4")
#     --fabrics "LIST"   fabcoll fabrics: shm (vs Open MPI vader), tcp and/or ofi:tcp (vs Open MPI's
#                        tcp BTL on lo) (default: "shm tcp ofi:tcp"; ofi:tcp is skipped if not built in)
#     --min BYTES --max BYTES   size range (default 8 .. 16777216, doubling)
#     --runs N           repetitions; medians over them (default 3)
#     --out DIR          results (default: target/bench-vs-openmpi)
#     --baseline DIR     also run another build of fabcoll (DIR holds its fabrun and fabcoll) in every
#                        run, alternating, and write OUT/vs-baseline.md: per transport, op and p the
#                        geometric mean over sizes of this build / the baseline (per size: the median of
#                        the per-run ratios) and the sizes where this build was slower in every run
#     --build DIR        measure the fabrun and fabcoll in DIR instead of building this tree (with
#                        --baseline naming a copy of the same build: an A/A check of how far the
#                        per-cell geomeans stray from 1 by noise alone)
#     --heap             fabcoll's buffers from the heap (`fabcoll bench --heap`), as mpibench's
#                        are (malloc), instead of `Communicator::alloc`'s shared memory
# BENCH_LIMIT (seconds, default 900) bounds each launch of either side.
#
# Sizes are mpibench's: the whole per-rank buffer, also for allgather and alltoall (fabcoll runs
# those with a per-rank / per-pair block of size/p, and rows are reported at the mpibench size).
# Method is mpibench's for both: per size, warm-up then back-to-back timed iterations (no barrier
# in between; fabcoll bench --sync none), 2000 iterations up to 8 KiB, 200 up to 1 MiB, 20 above,
# average per rank, averaged over ranks. fabcoll: f32 + sum for reductions, u8 for the others;
# mpibench: MPI_FLOAT throughout (same bytes).
# Writes OUT/raw.csv (run,impl,transport,op,p,bytes,usec), OUT/summary.csv and OUT/summary.md
# (medians, ratio = fabcoll / Open MPI: below 1 means fabcoll is faster; paired = the median of
# the per-run ratios; runs_at_or_below = in how many runs fabcoll was at or below Open MPI; the
# table at the end counts, per transport and p, the cells at or below and those slower in every run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

limit=${BENCH_LIMIT:-900} peers="" ops="allreduce bcast allgather alltoall" procs="2 4" fabrics="shm tcp ofi:tcp"
min=8 max=16777216 runs=3 out="$root/target/bench-vs-openmpi" base="" prebuilt="" heap=""
while [ $# -gt 0 ]; do
  case "$1" in
    --peers) peers=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --fabrics) fabrics=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --baseline) base=$2; shift 2 ;;
    --build) prebuilt=$2; shift 2 ;;
    --heap) heap=--heap; shift ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "bench-vs-openmpi: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
. scripts/openmpi-side.sh
openmpi_side bench-vs-openmpi "$peers" "$out"

ofi_ok=1
if ! "$bin/fabcoll" info --fabric ofi:tcp | grep -q "ofi:tcp    available"; then ofi_ok=0; fi

ompi=(mpiexec.openmpi --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo)
raw="$out/raw.csv"
echo "run,impl,transport,op,p,bytes,usec" >"$raw"

if [ -n "$base" ] && { [ ! -x "$base/fabrun" ] || [ ! -x "$base/fabcoll" ]; }; then
  echo "bench-vs-openmpi: --baseline $base holds no fabrun and fabcoll" >&2
  exit 2
fi

# fabcoll: three invocations per configuration, for mpibench's three iteration counts; BIN and
# IMPL name the build (this one, or the baseline's).
run_fabcoll() { # run fabric op p [bin impl]
  local run=$1 fabric=$2 op=$3 p=$4 b=${5:-$bin} impl=${6:-fabcoll} div=1 lo hi iters
  case "$op" in allgather|alltoall) div=$p ;; esac
  for range in "$min 8192 2000" "16384 1048576 200" "2097152 $max 20"; do
    set -- $range
    lo=$1 hi=$2 iters=$3
    [ "$lo" -lt "$min" ] && lo=$min
    [ "$div" -gt 1 ] && [ "$lo" -lt $((4 * p)) ] && lo=$((4 * p)) # as run_ompi: one float per block
    [ "$hi" -gt "$max" ] && hi=$max
    [ "$lo" -gt "$hi" ] && continue
    local f="$out/fabcoll.csv"
    if ! timeout "$limit" "$b/fabrun" -n "$p" --fabric "$fabric" --timeout $((limit - 20)) "$b/fabcoll" bench --op "$op" \
        --min-size $((lo / div)) --max-size $((hi / div)) --iters "$iters" --warmup $((iters / 10 + 1)) \
        --large-size 1G --sync none $heap --format csv --output "$f" >"$out/fabcoll.log" 2>&1; then
      echo "$impl $fabric $op p=$p failed:" >&2
      tail -5 "$out/fabcoll.log" >&2
      continue
    fi
    awk -F, -v run="$run" -v impl="$impl" -v t="$fabric" -v op="$op" -v p="$p" -v div="$div" \
      'NR > 1 { printf "%s,%s,%s,%s,%s,%d,%s\n", run, impl, t, op, p, $5 * div, $9 }' "$f" >>"$raw"
  done
}

run_ompi() { # run fabric op p
  local run=$1 fabric=$2 op=$3 p=$4 lo=$min
  local mca=(--mca pml ob1 --mca btl vader,self) label="openmpi-vader"
  if [ "$fabric" != shm ]; then
    mca=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
    label="openmpi-tcp"
  fi
  case "$op" in allgather|alltoall) [ "$lo" -lt $((4 * p)) ] && lo=$((4 * p)) ;; esac
  if ! timeout "$limit" "${ompi[@]}" "${mca[@]}" -n "$p" "$out/mpibench" "$op" "$lo" "$max" >"$out/mpi.log" 2>&1; then
    echo "mpibench $label $op p=$p failed:" >&2
    tail -5 "$out/mpi.log" >&2
    return
  fi
  awk -v run="$run" -v t="$fabric" -v op="$op" -v p="$p" \
    '/^[0-9]+ [0-9.]+$/ { printf "%s,openmpi,%s,%s,%s,%s,%s\n", run, t, op, p, $1, $2 }' "$out/mpi.log" >>"$raw"
}

for run in $(seq "$runs"); do
  for fabric in $fabrics; do
    if [ "${fabric#ofi:}" != "$fabric" ] && [ "$ofi_ok" = 0 ]; then
      echo "skipping $fabric: not available in this build (fabcoll info)" >&2
      continue
    fi
    for p in $procs; do
      for op in $ops; do
        echo "run $run: $fabric p=$p $op" >&2
        # Alternate who goes first, so drift does not favour one side.
        if [ $((run % 2)) = 1 ]; then
          run_fabcoll "$run" "$fabric" "$op" "$p"
          [ -n "$base" ] && run_fabcoll "$run" "$fabric" "$op" "$p" "$base" baseline
          run_ompi "$run" "$fabric" "$op" "$p"
        else
          run_ompi "$run" "$fabric" "$op" "$p"
          [ -n "$base" ] && run_fabcoll "$run" "$fabric" "$op" "$p" "$base" baseline
          run_fabcoll "$run" "$fabric" "$op" "$p"
        fi
      done
    done
  done
done

# Medians per (impl, transport, op, p, bytes), then one row per configuration with the ratio.
summary="$out/summary.csv"
tail -n +2 "$raw" | sort -t, -k2,2 -k3,3 -k4,4 -k5,5n -k6,6n -k7,7g | awk -F, '
  function flush() { if (n) { m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; print key "," m "," n } }
  { k = $2 "," $3 "," $4 "," $5 "," $6; if (k != key) { flush(); key = k; n = 0 } v[++n] = $7 }
  END { flush() }' >"$out/medians.csv"
# Paired: per run, fabcoll / Open MPI measured back to back in that run, then the median over
# runs. This machine drifts between speed regimes for minutes at a time (an 8 B bcast took 4.7 or
# 6.2 us on either side within one hour): a ratio of medians may divide one side's fast runs by
# the other's slow ones, a paired ratio compares runs made minutes apart. Both are reported.
tail -n +2 "$raw" | awk -F, '
  { k = $3 "," $4 "," $5 "," $6; v[$2 "," k "," $1] = $7; keys[k] = 1; runs[$1] = 1 }
  END {
    for (k in keys) {
      n = 0
      for (r in runs) {
        a = v["fabcoll," k "," r]; b = v["openmpi," k "," r]
        if (a != "" && b + 0 > 0) x[++n] = a / b
      }
      if (!n) continue
      for (i = 2; i <= n; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
      at = 0
      for (i = 1; i <= n; i++) if (x[i] <= 1) at++
      printf "%s,%.2f,%d/%d\n", k, (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2, at, n
    }
  }' >"$out/paired.csv"
echo "transport,op,p,bytes,fabcoll_us,openmpi_us,ratio,paired_ratio,runs_at_or_below,runs" >"$summary"
awk -F, '
  FILENAME ~ /paired.csv$/ { q[$1 "," $2 "," $3 "," $4] = $5 "," $6; next }
  $1 == "fabcoll" { f[$2 "," $3 "," $4 "," $5] = $6; n[$2 "," $3 "," $4 "," $5] = $7 }
  $1 == "openmpi" { o[$2 "," $3 "," $4 "," $5] = $6 }
  END { for (k in f) if (k in o && o[k] > 0) printf "%s,%.2f,%.2f,%.2f,%s,%d\n", k, f[k], o[k], f[k] / o[k], q[k], n[k] }' \
  "$out/paired.csv" "$out/medians.csv" | sort -t, -k1,1 -k2,2 -k3,3n -k4,4n >>"$summary"
{
  echo "# fabcoll vs Open MPI ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, medians of $runs runs)"
  echo
  echo "Average latency in µs (mpibench method, both sides). Open MPI: shm = ob1 + vader, ofi:tcp = ob1 + tcp BTL on lo."
  echo "ratio = fabcoll / Open MPI of the medians; paired = median over runs of fabcoll / Open MPI measured in"
  echo "the same run (below 1: fabcoll faster); at/below = in how many runs fabcoll was at or below Open MPI."
  echo
  echo "| transport | op | p | bytes | fabcoll µs | Open MPI µs | ratio | paired | at/below |"
  echo "|---|---|---|---|---|---|---|---|---|"
  tail -n +2 "$summary" | awk -F, '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
  echo
  # Per transport and p: how many cells are at or below by each measure. A cell where fabcoll was
  # slower in every one of n runs is above by the sign test (chance 2^-n if both were alike); one
  # that was slower in some runs only is within this machine's run-to-run drift.
  echo "| transport | p | cells | ratio ≤ 1 | paired ≤ 1 | slower in every run |"
  echo "|---|---|---|---|---|---|"
  tail -n +2 "$summary" | awk -F, '
    { k = $1 " | " $3; c[k]++; if ($7 <= 1) m[k]++; if ($8 <= 1) q[k]++
      split($9, a, "/"); if (a[1] == 0 && a[2] > 1) { s[k]++; w[k] = w[k] (w[k] == "" ? "" : ", ") $2 " " $4 } }
    END { for (k in c) printf "| %s | %d | %d | %d | %d%s |\n", k, c[k], m[k], q[k], s[k], (s[k] ? " (" w[k] ")" : "") }' | sort
} >"$out/summary.md"
cat "$out/summary.md"

[ -n "$base" ] || exit 0
# This build against the baseline: per cell the median over runs of the per-run ratio, per
# (transport, op, p) their geometric mean over sizes, and the cells slower in every run (with the
# smallest of their per-run ratios: "slower in every run by more than x").
tail -n +2 "$raw" | awk -F, '
  $2 != "openmpi" { v[$2 "," $3 "," $4 "," $5 "," $6 "," $1] = $7; cell[$3 "," $4 "," $5 "," $6] = 1; runs[$1] = 1 }
  END {
    for (c in cell) {
      n = 0; min = 1e300
      for (r in runs) {
        a = v["fabcoll," c "," r]; b = v["baseline," c "," r]
        if (a != "" && b + 0 > 0) { x[++n] = a / b; if (a / b < min) min = a / b }
      }
      if (!n) continue
      for (i = 2; i <= n; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
      printf "%s,%.4f,%.4f,%d\n", c, (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2, min, n
    }
  }' | sort -t, -k1,1 -k2,2 -k3,3n -k4,4n >"$out/vs-baseline.csv"
{
  echo "# this build / baseline ($base), $runs runs, alternating"
  echo
  echo "Per (transport, op, p): geomean over sizes of the per-size median of per-run ratios (below 1: this"
  echo "build faster); slower in every run: the sizes where every run was slower, with the least ratio."
  echo
  echo "| transport | op | p | sizes | geomean | max median | slower in every run |"
  echo "|---|---|---|---|---|---|---|"
  awk -F, '
    { k = $1 " | " $2 " | " $3; n[k]++; l[k] += log($5); if ($5 > mx[k]) mx[k] = $5
      if ($6 > 1) w[k] = w[k] (w[k] == "" ? "" : ", ") $4 " (" sprintf("%.2f", $6) ")" }
    END { for (k in n) printf "| %s | %d | %.3f | %.2f | %s |\n", k, n[k], exp(l[k] / n[k]), mx[k], (w[k] == "" ? "none" : w[k]) }' \
    "$out/vs-baseline.csv" | sort
} >"$out/vs-baseline.md"
cat "$out/vs-baseline.md"
