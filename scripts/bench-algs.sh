#!/usr/bin/env bash
# Forced algorithms of one collective against each other and against `auto`, measured in the same
# run and alternating: every round is one launch per p that measures all rows at each size in turn
# (`fabcoll bench --algo auto,A,B,...`), so rows compare within the same processes and placement,
# and the order rotates with the size and the round, so drift hits them alike.
#
#   scripts/bench-algs.sh --op OP --algos "A B ..." [options]
#     --procs "LIST"   process counts (default: "4")
#     --fabric F       fabric (default: shm)
#     --min B --max B  bench's size range (suffixes K, M; default 64K .. 64M); for allgather and
#                      alltoall that is the block per rank / pair, as `fabcoll bench` takes it
#     --rounds N       alternating rounds (default: 3)
#     --in-place       the calls in place (allreduce, allgather, alltoall: `fabcoll bench --in-place`)
#     --sync S         none (default: back to back, as mpibench times) or barrier (OSU: an untimed
#                      barrier after every call, so each call's own latency)
#     --bin DIR        where fabrun and fabcoll are (default: this tree's release build)
#     --out DIR        results (default: target/bench-algs)
# `auto` is always measured too. Writes OUT/raw.csv (round,op,fabric,p,algo,chosen,bytes,usec) and
# OUT/summary.md: per p and size, the median µs of each row, the best forced row, auto / best (the
# median over rounds of the per-round ratio) and what auto chose. Timed iterations: 200 up to
# 1 MiB, fewer in proportion above (at least 20), back to back unless --sync says. BENCH_LIMIT (seconds,
# default 600) bounds each launch.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${BENCH_LIMIT:-600} op="" algos="" procs=4 fabric=shm min=64K max=64M rounds=3 bin="" out=target/bench-algs
in_place=() sync=none
while [ $# -gt 0 ]; do
  case "$1" in
    --op) op=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --fabric) fabric=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --in-place) in_place=(--in-place); shift ;;
    --sync) sync=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench-algs: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$op" ] && [ -n "$algos" ] || { echo "bench-algs: --op and --algos are required" >&2; exit 2; }
if [ -z "$bin" ]; then
  cargo build --release --bin fabrun --bin fabcoll
  bin="${CARGO_TARGET_DIR:-target}/release"
fi
mkdir -p "$out"
raw="$out/raw.csv"
[ -f "$raw" ] || echo "round,op,fabric,p,algo,chosen,bytes,usec" >"$raw"
rows=(auto $algos)
for round in $(seq "$rounds"); do
  n=${#rows[@]} list=""
  for i in $(seq 0 $((n - 1))); do list="$list${list:+,}${rows[$(((i + round) % n))]}"; done
  for p in $procs; do
    echo "bench-algs: round $round $op p=$p $list" >&2
    if ! timeout "$limit" "$bin/fabrun" -n "$p" --fabric "$fabric" --timeout $((limit - 20)) "$bin/fabcoll" bench --op "$op" \
        --algo "$list" --min-size "$min" --max-size "$max" --iters 200 --warmup 21 --large-size 1M --sync "$sync" \
        "${in_place[@]}" --format csv --output "$out/one.csv" >"$out/one.log" 2>&1; then
      echo "bench-algs: $op p=$p round $round failed:" >&2
      tail -3 "$out/one.log" >&2
      continue
    fi
    awk -F, -v r="$round" -v op="$op" -v f="$fabric" -v p="$p" \
      'NR > 1 { printf "%s,%s,%s,%s,%s,%s,%s,%s\n", r, op, f, p, $17, $2, $5, $9 }' "$out/one.csv" >>"$raw"
  done
done
rm -f "$out/one.csv" "$out/one.log"
{
  echo "# $op${in_place:+ in place}: forced algorithms and auto ($fabric, --sync $sync, $(nproc) cores, $rounds alternating rounds, $(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "Median µs per row; best = the fastest forced row; auto/best = median over rounds of the"
  echo "per-round ratio of auto to that row; chose = auto's choice; choice/best = the same ratio of"
  echo "the forced row of auto's choice (how good the choice is, without auto's own run-to-run spread)."
  echo
  tail -n +2 "$raw" | awk -F, -v op="$op" '
    $2 == op { k = $4 "," $7; v[k "," $5, ++c[k "," $5]] = $8; t[k "," $5 "," $1] = $8; cells[k] = 1
               algs[$5] = 1; rs[$1] = 1; if ($5 == "auto") ch[k] = $6 }
    function med(key, n,   i, j, x, a) { for (i = 1; i <= n; i++) a[i] = v[key, i]
      for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END {
      hdr = "| p | bytes |"; sep = "|---|---|"
      for (a in algs) { names[++na] = a }
      for (i = 2; i <= na; i++) { x = names[i]; for (j = i - 1; j >= 1 && names[j] > x; j--) names[j + 1] = names[j]; names[j + 1] = x }
      for (i = 1; i <= na; i++) { hdr = hdr " " names[i] " |"; sep = sep "---:|" }
      print hdr " best | auto/best | chose | choice/best |"; print sep "---|---:|---|---:|"
      for (k in cells) order[++nc] = k
      for (i = 2; i <= nc; i++) { x = order[i]; split(x, xa, ","); for (j = i - 1; j >= 1; j--) { split(order[j], ya, ",")
        if (ya[1] + 0 < xa[1] + 0 || (ya[1] == xa[1] && ya[2] + 0 <= xa[2] + 0)) break; order[j + 1] = order[j] } order[j + 1] = x }
      for (o = 1; o <= nc; o++) {
        k = order[o]; split(k, kk, ","); line = "| " kk[1] " | " kk[2] " |"; best = ""; bm = 1e300
        for (i = 1; i <= na; i++) { a = names[i]; m = (c[k "," a] ? med(k "," a, c[k "," a]) : "")
          line = line " " (m == "" ? "-" : sprintf("%.1f", m)) " |"
          if (a != "auto" && m != "" && m < bm) { bm = m; best = a } }
        n = 0; for (r in rs) if ((k "," "auto" "," r) in t && (k "," best "," r) in t && t[k "," best "," r] > 0) {
          v["ratio", ++n] = t[k "," "auto" "," r] / t[k "," best "," r] }
        ar = (n ? sprintf("%.2f", med("ratio", n)) : "-")
        n = 0; for (r in rs) if ((k "," ch[k] "," r) in t && (k "," best "," r) in t && t[k "," best "," r] > 0) {
          v["ratio", ++n] = t[k "," ch[k] "," r] / t[k "," best "," r] }
        print line " " best " | " ar " | " ch[k] " | " (n ? sprintf("%.2f", med("ratio", n)) : "-") " |"
      }
    }'
} >"$out/summary.md"
cat "$out/summary.md"
