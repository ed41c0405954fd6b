#!/usr/bin/env bash
# Issue 35's speed acceptance on the namespace bed: 2 nodes × 2 ranks (scripts/netns-hosts.sh), node
# links at 1 Gbit/s, the best hierarchical against the best flat algorithm, both forced by name:
#   allgather 1 MiB per rank        hier_leader, hier_multi_leader
#                                                            vs ring, recursive_doubling, bruck
#   allreduce 16 MiB                hier_leader, hier_multi_leader
#                                                            vs ring, rabenseifner, recursive_doubling,
#                                                               rsag_pairwise_ring
#   allreduce 8 B .. --small-max    hier_leader, hier_multi_leader, hier_recursive_doubling
#                                                            vs recursive_doubling, reduce_bcast,
#                                                               allgather_reduce, ring, rabenseifner
#   bcast 8 B .. --small-max        hier_leader              vs binomial, linear, scatter_ring_allgather,
#                                                               scatter_recursive_doubling_allgather
# Each round runs every algorithm of a case in one job (`fabcoll bench --algo a,b,...`, which
# alternates their order per size), hierarchical first in even rounds and flat first in odd ones:
# the placement of the ranks on the cores changes from launch to launch and moves a small call's time
# more than the algorithm does, so algorithms are compared within a launch. The tables are made
# twice: with bench's avg_us (mean over ranks of each rank's mean per call), and with its max_us (the
# slowest rank's mean per call: when the collective has finished everywhere, which is what the next
# step of a program that uses every rank's result waits for; an algorithm whose ranks finish at
# different times looks faster by the mean). Per case and size, summary.md gives the medians over rounds of the best hierarchical
# and best flat time, the paired ratios best hier / best flat (one per round: < 1 = hierarchical
# faster) and their median, in how many rounds hierarchical was ahead, and the goal of the issue
# (≤ 1/1.4 for allgather 1 MiB and allreduce 16 MiB, ≤ 1.05 for the small sizes); then every
# algorithm's median.
#
#   sudo scripts/bench-nodes.sh [options]
#     --rounds N        alternating rounds (default 5, the acceptance's minimum)
#     --rate RATE       node link speed, tc tbf syntax (default 1gbit); `none`: unshaped bed
#     --fabrun          no namespaces: `fabrun -n 4 --nodes 2` (emulated nodes, TCP loopback, no
#                       rate limit, no root needed)
#     --small-max SIZE  largest of the small sizes (default 4K)
#     --cases LIST      only these cases (comma-separated: allgather-1M, allreduce-16M,
#                       allreduce-small, bcast-small; default all)
#     --iters N         timed iterations per size (bench --iters; default: bench's own)
#     --bin DIR         where fabcoll and fabrun are (default target/release)
#     --out DIR         raw CSVs, logs and summary.md (default target/bench-nodes/<mode>-<time>)
#     --summarize DIR   only rewrite DIR/summary.md from DIR/results.tsv of an earlier run
#
# On the bed (not --fabrun) it then measures the link's floor under the two large cases with
# scripts/tcp-exchange.py (python3; 2 nodes × 1 rank, no fabcoll): plain TCP sending, each way at
# once, the bytes the hierarchical algorithm must carry over a node's link (allgather: a node's k
# blocks of 1 MiB; allreduce: the whole 16 MiB vector, which any allreduce between two nodes must
# receive), in floor.md and at the end of summary.md. A goal whose time (goal × best flat) lies
# below that floor cannot be met on this link by any algorithm.
#
# The nodes share this machine's cores and memory bus: run it on a quiet machine (nothing else
# measuring), and compare only within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

rounds=5 rate=1gbit fabrun=0 small_max=4K iters="" only="" bin="$root/target/release" out="" summarize=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=${2-}; shift 2 ;;
    --rate) rate=${2-}; shift 2 ;;
    --fabrun) fabrun=1; shift ;;
    --small-max) small_max=${2-}; shift 2 ;;
    --cases) only=${2-}; shift 2 ;;
    --iters) iters=${2-}; shift 2 ;;
    --bin) bin=${2-}; shift 2 ;;
    --out) out=${2-}; shift 2 ;;
    --summarize) summarize=${2-}; shift 2 ;;
    -h|--help) sed -n '2,48p' "$0"; exit 0 ;;
    *) echo "bench-nodes: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
write_summary() { # the tables of $out/results.tsv into $out/summary.md
  local rows="$out/results.tsv"
  {
    cat "$out/about.md"
    echo "## Time: avg_us, the mean over ranks of each rank's mean per call"
    echo
    summary_tables 6 "$rows"
    if head -n 1 "$rows" | grep -q 'max_us'; then
      echo
      echo "## Time: max_us, the slowest rank's mean per call (the collective finished everywhere)"
      echo
      summary_tables 8 "$rows"
    fi
    if [ -f "$out/floor.md" ]; then echo; cat "$out/floor.md"; fi
  } > "$out/summary.md"
}
summary_tables() { # the tables of results.tsv ($2) with the time in its column $1
    awk -F'\t' -v t="$1" -f /dev/stdin "$2" <<'AWK'
function median(list,    a, n, i, j, v) {
  n = split(list, a, " ")
  for (i = 2; i <= n; i++) { v = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
  return n % 2 ? a[(n + 1) / 2] + 0 : (a[n / 2] + a[n / 2 + 1]) / 2
}
function size(b) { return b >= 1048576 ? b / 1048576 " MiB" : b >= 1024 ? b / 1024 " KiB" : b " B" }
BEGIN { CONVFMT = "%.17g" } # numbers kept in lists keep their digits
NR == 1 { next }
{
  key = $2 SUBSEP $5; kr = key SUBSEP $1
  if (!(key in goal)) { keys[++nk] = key; goal[key] = $7 }
  if ($3 == "hier" && (!(kr in hbest) || $t + 0 < hbest[kr])) { hbest[kr] = $t + 0; halgo[kr] = $4 }
  if ($3 == "flat" && (!(kr in fbest) || $t + 0 < fbest[kr])) { fbest[kr] = $t + 0; falgo[kr] = $4 }
  ka = key SUBSEP $4
  if (!(ka in times)) { algos[key] = algos[key] " " $4; cls[ka] = $3 }
  times[ka] = times[ka] " " $t; at[ka, $1] = $t + 0
  if (!((key, $1) in seen)) { seen[key, $1] = 1; rounds[key] = rounds[key] " " $1 }
}
END {
  print "| case | size | best hier (median us) | best flat (median us) | hier/flat per round | median hier/flat | hier ahead | goal ≤ | met | best hier / best flat most often |"
  print "|---|---|---:|---:|---|---:|---:|---:|---|---|"
  for (i = 1; i <= nk; i++) {
    key = keys[i]; split(key, kp, SUBSEP)
    hs = fs = rs = shown = ""; ahead = n = 0
    delete hc; delete fc
    m = split(rounds[key], rl, " ")
    for (j = 1; j <= m; j++) {
      kr = key SUBSEP rl[j]
      if (!(kr in hbest) || !(kr in fbest)) continue
      n++; hs = hs " " hbest[kr]; fs = fs " " fbest[kr]; rs = rs " " hbest[kr] / fbest[kr]
      shown = shown (shown == "" ? "" : " ") sprintf("%.3f", hbest[kr] / fbest[kr])
      if (hbest[kr] < fbest[kr]) ahead++
      hc[halgo[kr]]++; fc[falgo[kr]]++
    }
    if (n == 0) continue
    hm = ""; for (a in hc) if (hm == "" || hc[a] > hc[hm]) hm = a
    fm = ""; for (a in fc) if (fm == "" || fc[a] > fc[fm]) fm = a
    ratio = median(rs)
    printf "| %s | %s | %.2f | %.2f | %s | %.3f | %d/%d | %s | %s | %s / %s |\n", kp[1], size(kp[2]), median(hs), median(fs), shown, ratio, ahead, n, goal[key], ratio <= goal[key] + 0 ? "yes" : "no", hm, fm
  }
  print ""
  print "The same rounds, the two algorithms fixed: the hierarchical and the flat one with the lowest median over"
  print "rounds, their paired ratio per round (no minimum over several algorithms in each round, which favours"
  print "the side with more algorithms when they are within noise of each other):"
  print ""
  print "| case | size | hier | flat | hier/flat per round | median hier/flat | hier ahead | goal ≤ | met |"
  print "|---|---|---|---|---|---:|---:|---:|---|"
  for (i = 1; i <= nk; i++) {
    key = keys[i]; split(key, kp, SUBSEP)
    hb = fb = ""
    m = split(algos[key], al, " ")
    for (j = 1; j <= m; j++) {
      ka = key SUBSEP al[j]; md = median(times[ka])
      if (cls[ka] == "hier" && (hb == "" || md < hmd)) { hb = al[j]; hmd = md }
      if (cls[ka] == "flat" && (fb == "" || md < fmd)) { fb = al[j]; fmd = md }
    }
    if (hb == "" || fb == "") continue
    rs = shown = ""; ahead = n = 0
    m = split(rounds[key], rl, " ")
    for (j = 1; j <= m; j++) {
      h = key SUBSEP hb SUBSEP rl[j]; f = key SUBSEP fb SUBSEP rl[j]
      if (!(h in at) || !(f in at)) continue
      n++; rs = rs " " at[h] / at[f]; shown = shown (shown == "" ? "" : " ") sprintf("%.3f", at[h] / at[f])
      if (at[h] < at[f]) ahead++
    }
    if (n == 0) continue
    ratio = median(rs)
    printf "| %s | %s | %s | %s | %s | %.3f | %d/%d | %s | %s |\n", kp[1], size(kp[2]), hb, fb, shown, ratio, ahead, n, goal[key], ratio <= goal[key] + 0 ? "yes" : "no"
  }
  print ""
  print "Every algorithm, median us over rounds:"
  print ""
  print "| case | size | class | algorithm | median us | rounds |"
  print "|---|---|---|---|---:|---:|"
  for (i = 1; i <= nk; i++) {
    key = keys[i]; split(key, kp, SUBSEP)
    m = split(algos[key], al, " ")
    for (j = 1; j <= m; j++) {
      ka = key SUBSEP al[j]
      printf "| %s | %s | %s | %s | %.2f | %d |\n", kp[1], size(kp[2]), cls[ka], al[j], median(times[ka]), split(times[ka], tmp, " ")
    }
  }
}
AWK
}

if [ -n "$summarize" ]; then
  out=$summarize
  [ -f "$out/results.tsv" ] && [ -f "$out/about.md" ] || { echo "bench-nodes: no results.tsv and about.md in $out" >&2; exit 2; }
  write_summary
  exit 0
fi
case "$rounds" in ''|*[!0-9]*|0) echo "bench-nodes: --rounds needs a positive number" >&2; exit 2 ;; esac
case "$iters" in *[!0-9]*) echo "bench-nodes: --iters needs a number" >&2; exit 2 ;; esac
fabcoll="$bin/fabcoll" fabrun_bin="$bin/fabrun"
[ -x "$fabcoll" ] || { echo "bench-nodes: no $fabcoll (cargo build --release -p fabcoll-cli)" >&2; exit 2; }
if [ "$fabrun" = 1 ]; then
  [ -x "$fabrun_bin" ] || { echo "bench-nodes: no $fabrun_bin" >&2; exit 2; }
  mode="fabrun"
  what="fabrun -n 4 --nodes 2 (emulated nodes on this machine's loopback, no rate limit)"
elif [ "$(id -u)" != 0 ]; then
  echo "bench-nodes: the namespace bed needs root (or --fabrun: emulated nodes without namespaces)" >&2; exit 2
elif [ "$rate" = none ]; then
  mode="bed-unshaped"
  what="scripts/netns-hosts.sh --nodes 2 --per-node 2, node links unshaped (veth speed)"
else
  mode="bed-$rate"
  what="scripts/netns-hosts.sh --nodes 2 --per-node 2, node links at $rate (tc tbf, both directions)"
fi
[ -n "$out" ] || out="$root/target/bench-nodes/$mode-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/raw"
[ "$rounds" -ge 5 ] || echo "bench-nodes: $rounds rounds: fewer than the acceptance's 5 (a smoke run)" >&2

# One job of 2 nodes × 2 ranks running PROG ARGS.
job() {
  if [ "$fabrun" = 1 ]; then
    "$fabrun_bin" -n 4 --nodes 2 "$@"
  elif [ "$rate" = none ]; then
    bash scripts/netns-hosts.sh --nodes 2 --per-node 2 --timeout 600 -- "$@"
  else
    bash scripts/netns-hosts.sh --nodes 2 --per-node 2 --rate "$rate" --timeout 600 -- "$@"
  fi
}

# The placement the ranks see must be 2 nodes × 2 ranks, else the comparison means nothing.
job "$fabcoll" bench --op barrier --max-size 8 --iters 2 --warmup 1 > "$out/preflight.txt" 2>&1 || {
  echo "bench-nodes: the preflight job failed:" >&2; cat "$out/preflight.txt" >&2; exit 1; }
grep -q "topology 2 nodes × 2 ranks" "$out/preflight.txt" || {
  echo "bench-nodes: the ranks do not see 2 nodes × 2 ranks:" >&2; cat "$out/preflight.txt" >&2; exit 1; }

{
  echo "# Hierarchical vs flat on 2 nodes × 2 ranks"
  echo
  echo "- placement: $what"
  echo "- rounds: $rounds (alternating order); time: bench avg_us, then max_us; iterations: ${iters:-bench defaults}"
  echo "- fabcoll $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?'), $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ)"
  echo "- $(grep -m1 'topology' "$out/preflight.txt" | sed 's/^\[0\] # //')"
  echo
} > "$out/about.md"

# case | op | min size | max size | hierarchical algorithms | flat algorithms | goal (best hier / best flat ≤)
cases="allgather-1M|allgather|1M|1M|hier_leader hier_multi_leader|ring recursive_doubling bruck|0.714
allreduce-16M|allreduce|16M|16M|hier_leader hier_multi_leader|ring rabenseifner recursive_doubling rsag_pairwise_ring|0.714
allreduce-small|allreduce|8|$small_max|hier_leader hier_multi_leader hier_recursive_doubling|recursive_doubling reduce_bcast allgather_reduce ring rabenseifner|1.05
bcast-small|bcast|8|$small_max|hier_leader|binomial linear scatter_ring_allgather scatter_recursive_doubling_allgather|1.05"

rows="$out/results.tsv"
extra=()
if [ -n "$iters" ]; then extra=(--iters "$iters" --warmup $(((iters + 9) / 10))); fi
printf 'round\tcase\tclass\talgorithm\tbytes\tavg_us\tgoal\tmax_us\n' > "$rows"
for ((r = 0; r < rounds; r++)); do
  while IFS='|' read -r name op min max hier flat goal; do
    if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
    # One job runs every algorithm of the case (bench alternates their order per size): a launch's
    # placement of 4 ranks on this machine's cores moves every time it measures, so algorithms are
    # compared within a launch, not across launches.
    if [ $((r % 2)) = 1 ]; then list="$flat $hier"; else list="$hier $flat"; fi
    list=$(echo $list | tr ' ' ',')
    base="$out/raw/r$r-$name"
    echo "bench-nodes: round $((r + 1))/$rounds $name ($list)" >&2
    if ! job "$fabcoll" bench --op "$op" --algo "$list" --min-size "$min" --max-size "$max" ${extra[@]+"${extra[@]}"} \
      --format csv --output "$base.csv" > "$base.log" 2>&1 < /dev/null; then
      echo "bench-nodes: $name failed (round $((r + 1))), see $base.log:" >&2; tail -n 20 "$base.log" >&2; exit 1
    fi
    # Columns by name: the algorithm asked for, bytes, avg_us, max_us.
    awk -F, -v r="$r" -v c="$name" -v h=" $hier " -v g="$goal" '
      NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
      { a = $col["asked"]; printf "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r, c, index(h, " " a " ") ? "hier" : "flat", a,
          $col["bytes"], $col["avg_us"], g, $col["max_us"] }' "$base.csv" >> "$rows"
  done <<< "$cases"
done

if [ "$fabrun" = 0 ] && command -v python3 > /dev/null; then
  link=(--rate "$rate")
  [ "$rate" = none ] && link=()
  {
    echo "## The link's floor (plain TCP, no fabcoll: scripts/tcp-exchange.py, 2 nodes × 1 rank)"
    echo
    for bytes in 2097152 16777216; do
      bash scripts/netns-hosts.sh --nodes 2 --per-node 1 ${link[@]+"${link[@]}"} --timeout 120 -- \
        python3 scripts/tcp-exchange.py "$bytes" 10 < /dev/null 2>&1 | sed -n 's/^\[0\] /- /p'
    done
    echo
    echo "2 MiB each way is what allgather-1M's hierarchical algorithms carry over a node's link (the other node's"
    echo "two blocks); 16 MiB each way is what any allreduce-16M between the two nodes must carry."
  } > "$out/floor.md" || echo "bench-nodes: the floor measurement failed (see $out/floor.md)" >&2
fi
write_summary
cat "$out/summary.md"
echo "bench-nodes: raw CSVs and logs in $out/raw, every row in $rows, the tables in $out/summary.md" >&2
