#!/usr/bin/env bash
# Issue 38's check on a 16-core machine, as one command, from a bundle (that machine has no
# toolchain and no Open MPI). Here: build the release binaries, then `../shared/device/make-bundle.sh`
# (it packs fabrun, fabcoll, mpibench, membw, Open MPI and the shared libraries into target/devb).
# There, from a copy of the project root holding target/devb:
#
#   bash scripts/check-16core.sh [--bundle DIR] [--out DIR] [--deadline SECONDS] [--procs "8 16"]
#                                [--runs N] [--rounds N] [--tcp-fabrics "tcp ofi:tcp"] [--tune-log FILE] [--small]
#                                [--stages "1 2 3"] [--ops "allreduce"] [--min BYTES] [--baseline-env VAR=VALUE]
#
# Stages, in order of what they decide; one that would start after --deadline seconds is skipped
# (default 450: the device lends 15 minutes a session, its start included) and says so in log.txt;
# every launch is bounded by BENCH_LIMIT (default 90 s) so a hang costs one launch, not the run.
# Each stage's table is appended to summary.md:
#   1. host.txt: the machine (CPUs, NUMA nodes, L2 and L3 sizes: the best streaming threshold depends on the L3) and
#      its memcpy bandwidth (membw, the floor of large messages);
#   2. fabcoll shm against Open MPI vader, all four ops, 8 B-16 MiB (bench-vs-openmpi.sh);
#   3. forced allreduce algorithms and auto, 8 B-16 MiB, at each p (bench-algs.sh), the single
#      reducer (reduce_bcast), shmem_parallel and shmem_cyclic among them;
#   4. forced alltoall algorithms and auto at the largest p, 8 B-1 MiB per block (Bruck up to 2 KiB);
#   5. the first of --tcp-fabrics (default tcp, then ofi:tcp) against Open MPI's tcp BTL on lo;
#   6. the other --tcp-fabrics against Open MPI's tcp BTL;
#   7. Open MPI's own bcast algorithms over its tcp BTL at each p, 8 B-16 KiB, each forced with
#      coll_tuned_bcast_algorithm (0: its fixed decision): what fabcoll's small bcasts are up
#      against;
#   8. forced allgather algorithms and auto over each of --tcp-fabrics at the largest p, 256 KiB-8 MiB
#      in all (recursive doubling against the ring), and alltoall ones, 64 B-8 KiB per block;
#   9. forced bcast algorithms and auto over tcp at each p, 8 B-4 MiB back to back (where the
#      binomial tree should give way to scatter + allgather on a network, and to the binary tree,
#      whose ranks send at most twice, at small sizes), then 8 B-64 KiB with a barrier after each
#      call (each call's own latency, where the binary tree's longer path shows);
#  10. (only when named in --stages) in-place allreduce on heap buffers, as torch calls it, with and
#      without the pulled reductions (FABCOLL_PULL_REDUCE=0), alternating, from 1 MiB to the largest
#      size, at each p: pulls.md (with / without, median over rounds of the per-round ratio);
#  11. `fabcoll tune` of allreduce and alltoall on shm at the largest p until the deadline, when a
#      minute is left: tune-decisions.json (this machine's rules) and tune-log.jsonl (its measured
#      points; pass it back with --tune-log to resume where it stopped).
# raw.csv holds every measurement of stages 2-9 (bench-algs rows, then bench-vs-openmpi's and
# Open MPI's forced bcasts).
# --small: a trial of the whole path here (p = 2, small sizes, one round).
# --stages runs only the stages named; --ops and --min narrow the comparisons with Open MPI (and
# --min the allreduce rows); --baseline-env VAR=VALUE runs fabcoll a second time in every run of
# those comparisons with that setting, alternating, and appends vs-baseline.md (this build / the
# setting: a same-run A/B of a setting, e.g. FABCOLL_PULL_REDUCE=0).
set -u
cd "$(dirname "$0")/.."
bundle=target/devb out=${OUT:-/tmp/check-16core} deadline=450 procs="8 16" runs=2 rounds=2 small=0
tcp_fabrics="tcp ofi:tcp" tune_log="" stages="1 2 3 4 5 6 7 8 9 11" ops="allreduce bcast allgather alltoall" vs_min=8
baseline_env=""
export BENCH_LIMIT=${BENCH_LIMIT:-90}
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --tcp-fabrics) tcp_fabrics=$2; shift 2 ;;
    --tune-log) tune_log=$2; shift 2 ;;
    --small) small=1; shift ;;
    --stages) stages=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --min) vs_min=$2; shift 2 ;;
    --baseline-env) baseline_env=$2; shift 2 ;;
    -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
    *) echo "check-16core: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
D=$(cd "$bundle" && pwd) || { echo "check-16core: no bundle at $bundle" >&2; exit 2; }
rm -rf "$D"/algs-* "$D"/vs-* # a former run's tables would be appended to
mkdir -p "$out"
log="$out/log.txt"
: >"$log"
say() { echo "[$SECONDS s] $*" | tee -a "$log" >&2; }
left() { # stage name: is it asked for, and is there time for it?
  case " $stages " in *" ${1%% *} "*) ;; *) return 1 ;; esac
  if [ "$SECONDS" -ge "$deadline" ]; then say "skipped $1: past the deadline of $deadline s"; return 1; fi
  say "stage $1"
}
ar_min=$vs_min ar_max=16M a2a_min=8 a2a_max=1M bc_max=4M vs_max=16777216 ag_total_min=262144 ag_total_max=8388608
ob_max=16384 a2a_net_max=8K bc_lat_max=64K
if [ "$small" = 1 ]; then
  procs=2 runs=1 rounds=1 ar_min=64K ar_max=256K a2a_min=1K a2a_max=4K bc_max=8K vs_max=4096 ag_total_min=4096
  ag_total_max=16384 ob_max=64 a2a_net_max=256 bc_lat_max=64
fi
largest=${procs##* }

mkdir -p "$D/root" && tar -xzf "$D/libs.tgz" -C "$D/root"
export LD_LIBRARY_PATH="$D/root/usr/lib/x86_64-linux-gnu:$D/root/lib/x86_64-linux-gnu:$D/root/usr/lib/x86_64-linux-gnu/openmpi/lib"
export OPAL_PREFIX="$D/root/usr" PATH="$D/root/usr/bin:$PATH"
# bench-vs-openmpi with its build step (openmpi_side) replaced by the bundle's binaries
sed -e "s#^\. scripts/openmpi-side.sh\$#openmpi_side() { bin=$D/bin; mkdir -p \"\$3\"; cp $D/bin/mpibench \"\$3/\"; }#" \
  scripts/bench-vs-openmpi.sh >scripts/.bench-vs-openmpi-bundle.sh
trap 'rm -f scripts/.bench-vs-openmpi-bundle.sh' EXIT

if left "1 (host, membw)"; then
  { grep PRETTY /etc/os-release; nproc; lscpu | grep -E 'Model name|NUMA node\(s\)|^CPU\(s\)|L2 cache|L3 cache'; uname -r; } >"$out/host.txt" 2>&1
  if [ "$small" = 1 ]; then echo "(--small: membw not run)" >>"$out/host.txt"; else "$D/bin/membw" >>"$out/host.txt" 2>&1; fi
  cat "$out/host.txt" >>"$log"
  # the shm fabric works here at all (memfd and /proc/PID/fd across processes)
  timeout 60 "$D/bin/fabrun" -n 4 --fabric shm --timeout 50 "$D/bin/fabcoll" bench --op allreduce --max-size 64K \
    --iters 10 --warmup 1 --check >>"$log" 2>&1 || say "shm smoke test failed (see above)"
fi
algs() { # op algos procs min max name [fabric [sync]]
  scripts/bench-algs.sh --op "$1" --algos "$2" --procs "$3" --min "$4" --max "$5" --rounds "$rounds" --bin "$D/bin" \
    --fabric "${7:-shm}" --sync "${8:-none}" \
    --out "$D/algs-$6" >>"$log" 2>&1 || say "bench-algs $1 failed"
  { echo; cat "$D/algs-$6/summary.md"; } >>"$out/summary.md" 2>/dev/null
  tail -n +2 "$D/algs-$6/raw.csv" 2>/dev/null | sed 's/^/algs,/' >>"$out/raw.csv"
}
base=()
if [ -n "$baseline_env" ]; then # the same binaries under the setting, as bench-vs-openmpi's baseline build
  mkdir -p "$D/baseline" && ln -sf "$D/bin/fabrun" "$D/baseline/fabrun"
  printf '#!/bin/sh\nexport %q\nexec %q "$@"\n' "$baseline_env" "$D/bin/fabcoll" >"$D/baseline/fabcoll"
  chmod +x "$D/baseline/fabcoll" && base=(--baseline "$D/baseline")
fi
vs() { # fabrics name
  bash scripts/.bench-vs-openmpi-bundle.sh --fabrics "$1" --procs "$procs" --runs "$runs" --min "$vs_min" --max "$vs_max" \
    --ops "$ops" "${base[@]}" --out "$D/vs-$2" >>"$log" 2>&1 || say "bench-vs-openmpi $1 failed"
  { echo; cat "$D/vs-$2/summary.md"; } >>"$out/summary.md" 2>/dev/null
  if [ -n "$baseline_env" ]; then { echo; echo "(baseline: $baseline_env)"; cat "$D/vs-$2/vs-baseline.md"; } >>"$out/summary.md" 2>/dev/null; fi
  tail -n +2 "$D/vs-$2/raw.csv" 2>/dev/null | sed 's/^/vs,/' >>"$out/raw.csv"
}
if left "2 (shm against Open MPI)"; then vs shm shm; fi
if left "3 (allreduce algorithms)"; then
  algs allreduce "recursive_doubling reduce_bcast shmem_cyclic shmem_parallel rabenseifner rsag_pairwise_ring" "$procs" "$ar_min" "$ar_max" allreduce
fi
if left "4 (alltoall algorithms)"; then
  # Bruck's lg p rounds of half the data pay only for small blocks, and its large rows took most of
  # the stage: it competes up to 2 KiB
  algs alltoall "bruck simple spreading_simple pairwise_xor" "$largest" "$a2a_min" 2K alltoall-small
  algs alltoall "simple spreading_simple pairwise_xor" "$largest" 4K "$a2a_max" alltoall
fi
first_tcp=${tcp_fabrics%% *} other_tcp=${tcp_fabrics#"$first_tcp"}
if left "5 ($first_tcp against Open MPI)"; then vs "$first_tcp" tcp; fi
if [ -n "${other_tcp// /}" ] && left "6 ($other_tcp against Open MPI)"; then vs "$other_tcp" tcp-other; fi
if left "7 (Open MPI's bcast algorithms over tcp)"; then
  ob="$D/ompi-bcast" && rm -rf "$ob" && mkdir -p "$ob"
  ompi_tcp=(mpiexec.openmpi --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1
    --mca btl tcp,self --mca btl_tcp_if_include lo --mca coll_tuned_use_dynamic_rules 1)
  # 0 is Open MPI's fixed decision; 1-9 its bcast algorithms in 4.1 (a number it lacks fails and is left out)
  for p in $procs; do for alg in 0 1 2 3 4 5 6 7 8 9; do
    if timeout 60 "${ompi_tcp[@]}" --mca coll_tuned_bcast_algorithm "$alg" -n "$p" "$D/bin/mpibench" bcast 8 "$ob_max" \
        >"$ob/one.log" 2>&1; then
      awk -v p="$p" -v a="$alg" '/^[0-9]+ [0-9.]+$/ { print p "," a "," $1 "," $2 }' "$ob/one.log" >>"$ob/raw.csv"
    else
      say "Open MPI bcast algorithm $alg p=$p failed: $(tail -1 "$ob/one.log")"
    fi
  done; done
  sed 's/^/ompi-bcast,/' "$ob/raw.csv" >>"$out/raw.csv" 2>/dev/null
  # one row per (p, algorithm), one column per size
  sort -t, -k1,1n -k2,2n -k3,3n "$ob/raw.csv" 2>/dev/null | awk -F, '
    { if (!($3 in seen)) { seen[$3] = 1; sizes[++ns] = $3 } k = $1 "," $2; if (!(k in row)) keys[++nk] = k
      row[k] = 1; us[k "," $3] = $4 }
    END { printf "# Open MPI bcast over its tcp BTL, each algorithm forced (coll_tuned_bcast_algorithm; 0: its fixed decision), µs\n\n| p | algorithm |"
          for (i = 1; i <= ns; i++) printf " %s |", sizes[i]; printf "\n|---|---|"; for (i = 1; i <= ns; i++) printf "---:|"; printf "\n"
          for (j = 1; j <= nk; j++) { split(keys[j], f, ","); printf "| %s | %s |", f[1], f[2]
            for (i = 1; i <= ns; i++) printf " %s |", us[keys[j] "," sizes[i]]; printf "\n" } }' >"$ob/ompi-bcast.md"
  { echo; cat "$ob/ompi-bcast.md"; } >>"$out/summary.md"
fi
if left "8 (allgather and alltoall algorithms over the tcp fabrics)"; then
  for f in $tcp_fabrics; do
    algs allgather "recursive_doubling ring bruck" "$largest" $((ag_total_min / largest)) $((ag_total_max / largest)) \
      "allgather-${f/:/-}" "$f"
    algs alltoall "bruck simple spreading_simple pairwise_xor" "$largest" 64 "$a2a_net_max" "alltoall-${f/:/-}" "$f"
  done
fi
if left "9 (bcast algorithms over tcp)"; then
  bc_algos="binomial binary_tree linear scatter_recursive_doubling_allgather scatter_ring_allgather"
  algs bcast "$bc_algos" "$procs" 8 "$bc_max" bcast-tcp tcp
  algs bcast "binomial binary_tree linear" "$procs" 8 "$bc_lat_max" bcast-tcp-barrier tcp barrier
fi
if left "10 (in-place allreduce with and without pulls)"; then
  pulls="$D/pulls" && rm -rf "$pulls" && mkdir -p "$pulls"
  pull_min=1M; [ "$small" = 1 ] && pull_min=$ar_min
  for round in $(seq "$rounds"); do
    settings="0 65536"; [ $((round % 2)) = 0 ] && settings="65536 0"
    for p in $procs; do for v in $settings; do
      FABCOLL_PULL_REDUCE=$v timeout "$BENCH_LIMIT" "$D/bin/fabrun" -n "$p" --fabric shm --timeout $((BENCH_LIMIT - 10)) \
        "$D/bin/fabcoll" bench --op allreduce --in-place --heap --min-size "$pull_min" --max-size "$ar_max" --iters 20 \
        --warmup 3 --sync none --format csv --output "$pulls/one.csv" >>"$log" 2>&1 || say "in-place p=$p pulls=$v failed"
      awk -F, -v r="$round" -v p="$p" -v v="$v" 'NR > 1 { print r "," p "," v "," $5 "," $9 "," $2 }' "$pulls/one.csv" \
        >>"$pulls/raw.csv" 2>/dev/null
    done; done
  done
  # per (round, p, bytes): with / without; then, sorted, the median per (p, bytes) (mawk: no sort of its own)
  awk -F, '{ t[$1 "," $2 "," $4 "," $3] = $5; alg[$2 "," $4] = $6 }
    END { for (k in t) { split(k, f, ","); if (f[4] != 0) continue
            on = t[f[1] "," f[2] "," f[3] ",65536"]; off = t[k]
            if (on > 0 && off > 0) printf "%s,%s,%.4f,%s\n", f[2], f[3], on / off, alg[f[2] "," f[3]] } }' \
    "$pulls/raw.csv" | sort -t, -k1,1n -k2,2n -k3,3g |
    awk -F, 'function flush() { if (m == 0) return
               med = (m % 2) ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
               printf "| %s | %s | %s | %.2f | %s |\n", pp, bb, a, med, list }
      BEGIN { print "# in-place allreduce, heap buffers: with the pulled reductions / without (FABCOLL_PULL_REDUCE=0)"
              print ""; print "| p | bytes | algorithm | ratio (median) | sorted per-round ratios |"
              print "|---|---:|---|---:|---|" }
      $1 != pp || $2 != bb { flush(); pp = $1; bb = $2; a = $4; m = 0; list = "" }
      { x[++m] = $3; list = list sprintf(" %.2f", $3) }
      END { flush() }' >"$pulls/pulls.md" 2>>"$log"
  { echo; cat "$pulls/pulls.md"; } >>"$out/summary.md"
  cp "$pulls/pulls.md" "$out/"
fi
if [ $((deadline - SECONDS)) -lt 60 ] && [ "$small" = 0 ]; then
  say "skipped 11 (tune): less than a minute left before the deadline of $deadline s"
elif left "11 (tune)"; then
  minutes=$(((deadline - SECONDS) / 60)); [ "$minutes" -lt 1 ] && minutes=1
  [ -n "$tune_log" ] && cp "$tune_log" "$out/tune-log.jsonl"
  tune_max=16M; [ "$small" = 1 ] && tune_max=4K
  (cd "$out" && timeout $((minutes * 60 + 40)) "$D/bin/fabrun" -n "$largest" --fabric shm --timeout $((minutes * 60 + 30)) \
    "$D/bin/fabcoll" tune --ops allreduce,alltoall --max-size "$tune_max" --budget-minutes "$minutes" \
    --out tune-decisions.json --log tune-log.jsonl >>"$log" 2>&1) || say "tune failed"
fi
say "done"
