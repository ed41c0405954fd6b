#!/usr/bin/env bash
# How low small messages over loopback TCP can go, layer by layer, measured in one run and
# alternating: the kernel (raw sockets, fabric/benches/sock_raw.c), libfabric's TCP providers
# without fabcoll (raw C on tcp;ofi_rxm and net, fabric/benches/ofi_raw.c), Open MPI's tcp BTL
# (mpibench), and fabcoll on tcp (its own sockets backend) and on ofi:tcp. It answers whether a
# gap to Open MPI is fabcoll's or the layer's below it: the raw C programs run what a 2-rank collective needs at least
# (an 8 B exchange for allreduce, a one-way stream of 8 B writes, back-to-back blocking broadcasts
# of 8 B–16 KiB with the slots, credits and completion waits fabcoll's need, 1 MiB writes with a
# window for large broadcasts) and nothing else (no headers, no planning, no lookups).
#
#   scripts/tcp-floor.sh [--rounds N] [--peers DIR] [--out DIR]
#     --rounds N   repetitions; medians over them (default 5)
#     --peers DIR  directory holding mpibench.c (default: ../shared/peers or ../../shared/peers)
#     --out DIR    results (default: target/tcp-floor)
#
# Writes OUT/raw.csv (round,layer,metric,value), OUT/medians.csv (layer,metric,median over rounds) and
# OUT/summary.md (medians, and each layer's broadcast paired with Open MPI's of the same round: the
# median over rounds of the ratio; times in µs per
# operation: lat = half a ping-pong round trip, xchg = one exchange, stream = one message of a
# one-way stream, bcast = one blocking broadcast of a back-to-back series; 1MiB = one 1 MiB message
# of a stream (raw C: from its bandwidth), Open MPI's and fabcoll's rows are their bcast /
# allreduce averages, mpibench method (back to back) both).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

rounds=5 peers="" out="$root/target/tcp-floor"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "tcp-floor: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
. scripts/openmpi-side.sh
openmpi_side tcp-floor "$peers" "$out"
cc -O2 -o "$out/ofi_raw" fabric/benches/ofi_raw.c -lfabric
cc -O2 -o "$out/sock_raw" fabric/benches/sock_raw.c

raw="$out/raw.csv"
echo "round,layer,metric,value" >"$raw"
# Must match bcast_sizes in ofi_raw.c. The summary's bcast columns come from this list: each
# size's metric (bcast_<bytes>B_us) and its heading (bcast_8B, bcast_1KiB, ...).
bcast_sizes="8 256 1024 4096 16384"
bcast_metrics="" bcast_heads=""
for b in $bcast_sizes; do
  bcast_metrics="$bcast_metrics bcast_${b}B_us"
  if [ "$b" -ge 1024 ]; then bcast_heads="$bcast_heads | bcast_$((b / 1024))KiB"; else bcast_heads="$bcast_heads | bcast_${b}B"; fi
done

# Two ranks of a raw C program (pinned like fabrun pins), rank 0's "name value" lines as rows.
run_pair() { # round layer exe [args...]
  local round=$1 layer=$2 dir
  shift 2
  dir=$(mktemp -d)
  FABCOLL_BENCH_RANK=1 FABCOLL_BENCH_DIR=$dir timeout 120 taskset -c 1 "$@" >/dev/null 2>&1 &
  local pid=$!
  FABCOLL_BENCH_RANK=0 FABCOLL_BENCH_DIR=$dir timeout 120 taskset -c 0 "$@" 2>/dev/null |
    awk -v r="$round" -v l="$layer" 'NF == 2 { printf "%s,%s,%s,%s\n", r, l, $1, $2 }' >>"$raw" || true
  wait "$pid" || true
  rm -rf "$dir"
}

run_ompi() { # round op bytes metric
  timeout 120 mpiexec.openmpi --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 \
    --mca btl tcp,self --mca btl_tcp_if_include lo -n 2 "$out/mpibench" "$2" "$3" "$3" 2>/dev/null |
    awk -v r="$1" -v m="$4" -v b="$3" '$1 == b && NF == 2 { printf "%s,openmpi-tcp,%s,%s\n", r, m, $2 }' >>"$raw" || true
}

run_fabcoll() { # round fabric op bytes metric
  local iters=20000
  [ "$4" -gt 65536 ] && iters=200
  timeout 120 "$bin/fabrun" -n 2 --fabric "$2" --timeout 110 "$bin/fabcoll" bench --op "$3" --min-size "$4" \
    --max-size "$4" --iters "$iters" --warmup $((iters / 10)) --large-size 1G --sync none --format csv \
    --output "$out/fabcoll.csv" >/dev/null 2>&1 || true
  awk -F, -v r="$1" -v l="fabcoll-$2" -v m="$5" 'NR > 1 { printf "%s,%s,%s,%s\n", r, l, m, $9 }' "$out/fabcoll.csv" >>"$raw"
  rm -f "$out/fabcoll.csv"
}

for round in $(seq "$rounds"); do
  echo "round $round of $rounds" >&2
  run_ompi "$round" allreduce 8 xchg_8B_us
  for b in $bcast_sizes; do run_ompi "$round" bcast "$b" "bcast_${b}B_us"; done
  run_ompi "$round" bcast 1048576 stream_1MiB_us
  run_pair "$round" sockets "$out/sock_raw"
  run_pair "$round" "raw-tcp;ofi_rxm" "$out/ofi_raw" "tcp;ofi_rxm"
  run_pair "$round" raw-net "$out/ofi_raw" net
  for fabric in tcp ofi:tcp; do
    run_fabcoll "$round" "$fabric" allreduce 8 xchg_8B_us
    for b in $bcast_sizes; do run_fabcoll "$round" "$fabric" bcast "$b" "bcast_${b}B_us"; done
    run_fabcoll "$round" "$fabric" bcast 1048576 stream_1MiB_us
  done
done

# Raw C reports 1 MiB bandwidth (MB/s); as µs per 1 MiB message it compares with a 1 MiB bcast.
awk -F, 'NR > 1 && $3 == "bw_1MiB_MBps" && $4 > 0 { printf "%s,%s,stream_1MiB_us,%.2f\n", $1, $2, 1048576 / $4 }' \
  "$raw" >"$out/derived.csv"
# The median over rounds of every layer's metric, once, for the tables below (layer,metric,median).
tail -n +2 "$raw" | cat - "$out/derived.csv" | sort -t, -k2,2 -k3,3 -k4,4g | awk -F, '
  function flush() { if (n) printf "%s,%s,%s\n", l, mt, (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
  { if ($2 != l || $3 != mt) { flush(); l = $2; mt = $3; n = 0 } v[++n] = $4 }
  END { flush() }' >"$out/medians.csv"
{
  echo "# Small messages over loopback TCP, layer by layer ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, medians of $rounds rounds)"
  echo
  echo "µs per operation. lat: half a ping-pong round trip; xchg: both ranks send 8 B, then both receive (Open MPI and"
  echo "fabcoll: allreduce of 8 B); stream: one 8 B message of a one-way stream (raw C, window 8); bcast_N: one"
  echo "blocking broadcast of N bytes, back to back (raw C: 64 slots, a credit every 32, injected up to the provider's"
  echo "inject size, else each write's completion read before the next); 1MiB: one 1 MiB message of a stream (raw C:"
  echo "1 MiB / its bandwidth; Open MPI and fabcoll: bcast of 1 MiB). _inject: the raw C program with"
  echo "fi_inject_writedata (no completion)."
  echo
  cols="lat_8B_us xchg_8B_us xchg_inject_8B_us stream_8B_us stream_inject_8B_us$bcast_metrics stream_1MiB_us"
  echo "| layer | lat_8B | xchg_8B | xchg_inject_8B | stream_8B | stream_inject_8B$bcast_heads | 1MiB |"
  echo "|---$(printf '|---%.0s' $cols)|"
  awk -F, -v columns="$cols" '
    { m[$1 SUBSEP $2] = $3; layers[$1] = 1 }
    END {
      split("sockets raw-tcp;ofi_rxm raw-net openmpi-tcp fabcoll-tcp fabcoll-ofi:tcp", order, " ")
      ncols = split(columns, cols, " ")
      for (i = 1; i <= 6; i++) {
        l = order[i]
        if (!(l in layers)) continue
        line = "| " l
        for (c = 1; c <= ncols; c++) line = line " | " (((l SUBSEP cols[c]) in m) ? sprintf("%.2f", m[l SUBSEP cols[c]]) : "-")
        print line " |"
      }
    }' "$out/medians.csv"
  echo
  echo "Broadcast against Open MPI's tcp BTL, paired: per round, the layer's time over Open MPI's of the same round;"
  echo "the median over rounds, and the lowest and highest (below 1: faster than Open MPI)."
  echo
  echo "| layer$bcast_heads |"
  echo "|---$(printf '|---%.0s' $bcast_sizes)|"
  tail -n +2 "$raw" | awk -F, -v metrics="$bcast_metrics" -v rounds="$rounds" '$3 ~ /^bcast_/ { t[$1 SUBSEP $2 SUBSEP $3] = $4; layers[$2] = 1 }
    END {
      split("raw-tcp;ofi_rxm raw-net fabcoll-tcp fabcoll-ofi:tcp", order, " ")
      nmetrics = split(metrics, metric, " ")
      for (i = 1; i <= 4; i++) {
        l = order[i]
        if (!(l in layers)) continue
        line = "| " l
        for (c = 1; c <= nmetrics; c++) {
          n = 0
          for (round = 1; round <= rounds; round++) {
            mine = round SUBSEP l SUBSEP metric[c]; theirs = round SUBSEP "openmpi-tcp" SUBSEP metric[c]
            if ((mine in t) && (theirs in t) && t[theirs] > 0) r[++n] = t[mine] / t[theirs]
          }
          if (!n) { line = line " | -"; continue }
          for (a = 2; a <= n; a++) { x = r[a]; for (b = a - 1; b >= 1 && r[b] > x; b--) r[b + 1] = r[b]; r[b + 1] = x }
          med = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
          line = line sprintf(" | %.2f [%.2f–%.2f]", med, r[1], r[n])
        }
        print line " |"
      }
    }'
  echo
  echo "The raw C broadcasts' completion waits above the provider's inject size (medians): µs per broadcast spent"
  echo "reading the write's completion (cqread), its share of the broadcast, and the share of writes that the first"
  echo "read found complete (cqfirst). A wait for a write already done on return is the provider's progress call"
  echo "alone (on net, an epoll_wait): what a one-sided write above the inject size costs over a stream's send."
  echo
  echo "| layer | bytes | cqread | of bcast | cqfirst |"
  echo "|---|---|---|---|---|"
  awk -F, '
    { m[$1 SUBSEP $2] = $3 }
    END {
      for (k in m) {
        split(k, a, SUBSEP)
        if (a[2] !~ /^cqread_/) continue
        b = a[2]; sub(/^cqread_/, "", b); sub(/B_us$/, "", b)
        bc = a[1] SUBSEP "bcast_" b "B_us"; cf = a[1] SUBSEP "cqfirst_" b "B_pct"
        printf "| %s | %s | %.2f µs | %s | %s |\n", a[1], b, m[k], (bc in m && m[bc] > 0) ? sprintf("%.0f %%", 100 * m[k] / m[bc]) : "-", (cf in m) ? sprintf("%.0f %%", m[cf]) : "-"
      }
    }' "$out/medians.csv" | sort -t'|' -k2,2 -k3,3n
} >"$out/summary.md"
cat "$out/summary.md"
