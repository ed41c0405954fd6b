#!/usr/bin/env bash
# Runs a job as if on N machines ("nodes") of K ranks each: one network namespace per node, each with
# its own interface (veth) on one bridge, optionally rate-limited with tc (tbf). Ranks start the way a
# cluster launcher starts them (no fabrun): rank = node × K + local rank, FABCOLL_RANK/SIZE,
# FABCOLL_LOCAL_RANK/LOCAL_SIZE counting the ranks of their node, FABCOLL_NODE=node<i> (the
# namespaces share this machine's host name and boot id, which would make them one node), a shared
# token, and FABCOLL_STORE at node 0, whose first rank (rank 0) serves the store. No fabric is named
# unless FABCOLL_FABRIC is set, so the ranks pick the default across nodes (tcp; shm when there is
# one node) and each finds its own address by the route to the store (FABCOLL_TCP_ADDR unset).
# Ranks of one node reach each other over that namespace's loopback, which --rate does not limit.
#
#   sudo scripts/netns-hosts.sh [--nodes N] [--per-node K] [--rate RATE] [--link-down I@S] [--no-pin] [--timeout S] -- PROG [ARGS...]
#     --nodes N, -n N  nodes, one namespace each (default 2; at most 200)
#     --per-node K     ranks per node (default 1; at most 64)
#     --rate RATE      each node's link speed, tc tbf syntax (e.g. 10gbit, 1gbit), both directions:
#                      node to switch (egress of the node's eth0) and switch to node (egress of its
#                      switch port), as a full-duplex NIC; default: unshaped (veth speed)
#     --link-down I@S  take node I's link down S seconds (decimals allowed) after the ranks start, as
#                      a cable pulled or a switch port failing (the fault matrix of issue 37)
#     --no-pin         let the ranks run on any of this machine's CPUs; by default each node's ranks
#                      are bound (taskset) to a share of them, as if each node had cores of its own:
#                      C CPUs over N nodes give node i CPUs i·C/N … (i+1)·C/N − 1 when C ≥ N, else
#                      CPU i mod C (then nodes share CPUs)
#     --timeout S      kill the job after S seconds (default 300)
#
# Needs root (ip netns, ip link, tc from iproute2). Traffic stays inside namespaces this script
# creates (10.250.0.0/24, node i at 10.250.0.<i+1>); they are deleted and the ranks still running
# are stopped on exit, also on failure or interrupt. Output lines are prefixed "[rank] "; the exit
# status is 0 when every rank exits 0, else the first failing rank's status (124 on timeout). The
# nodes share this machine's cores: with more ranks than cores, waiting ranks yield the core
# (FABCOLL_YIELD=1 unless set), which each rank, seeing only its node's ranks, could not know.
set -euo pipefail

nodes=2 per=1 rate="" limit=300 down="" pin=1
while [ $# -gt 0 ]; do
  case "$1" in
    -n|--nodes) nodes=${2-}; shift 2 ;;
    --per-node) per=${2-}; shift 2 ;;
    --rate) rate=${2-}; shift 2 ;;
    --link-down) down=${2-}; shift 2 ;;
    --no-pin) pin=0; shift ;;
    --timeout) limit=${2-}; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "netns-hosts: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "netns-hosts: no program given (see --help)" >&2; exit 2; }
number() { case "$2" in ''|*[!0-9]*) echo "netns-hosts: $1 needs a number, not '$2'" >&2; exit 2 ;; esac; }
number --nodes "$nodes"
number --per-node "$per"
number --timeout "$limit"
[ "$nodes" -ge 1 ] && [ "$nodes" -le 200 ] || { echo "netns-hosts: --nodes must be 1..200" >&2; exit 2; }
[ "$per" -ge 1 ] && [ "$per" -le 64 ] || { echo "netns-hosts: --per-node must be 1..64" >&2; exit 2; }
command -v ip >/dev/null || { echo "netns-hosts: needs ip (iproute2)" >&2; exit 2; }
if [ -n "$rate" ]; then command -v tc >/dev/null || { echo "netns-hosts: --rate needs tc (iproute2)" >&2; exit 2; }; fi
if [ "$pin" = 1 ]; then command -v taskset >/dev/null || { echo "netns-hosts: pinning needs taskset (util-linux; --no-pin)" >&2; exit 2; }; fi
down_node="" down_after=""
if [ -n "$down" ]; then
  down_node=${down%@*} down_after=${down#*@}
  number "--link-down's node" "$down_node"
  case "$down_after" in ''|*[!0-9.]*) echo "netns-hosts: --link-down needs NODE@SECONDS, not '$down'" >&2; exit 2 ;; esac
  [ "$down_node" -lt "$nodes" ] || { echo "netns-hosts: --link-down names node $down_node of $nodes" >&2; exit 2; }
fi
size=$((nodes * per))

tag="fc$$"          # unique per run: parallel runs do not collide
sw="$tag-sw"        # the switch: a namespace holding the bridge
pids=()
downer=""
cleanup() {
  if [ -n "$downer" ]; then kill "$downer" 2>/dev/null || true; fi
  for pid in ${pids[@]+"${pids[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
  for ((i = 0; i < nodes; i++)); do ip netns del "$tag-h$i" 2>/dev/null || true; done
  ip netns del "$sw" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

shape() { # namespace, device: tbf at $rate on the device's egress
  tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 50ms
}
ip netns add "$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for ((i = 0; i < nodes; i++)); do
  h="$tag-h$i"
  ip netns add "$h"
  ip link add "eth0" netns "$h" type veth peer name "p$i" netns "$sw"
  ip -n "$sw" link set "p$i" master br0 up
  ip -n "$h" addr add "10.250.0.$((i + 1))/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  if [ -n "$rate" ]; then
    shape "$h" eth0    # node -> switch
    shape "$sw" "p$i"  # switch -> node
  fi
done

if [ -z "${FABCOLL_YIELD:-}" ] && [ "$size" -gt "$(nproc)" ]; then export FABCOLL_YIELD=1; fi
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
cpus=$(nproc)
for ((i = 0; i < nodes; i++)); do
  bind=()
  if [ "$pin" = 1 ]; then
    if [ "$cpus" -ge "$nodes" ]; then
      bind=(taskset -c "$((i * cpus / nodes))-$(((i + 1) * cpus / nodes - 1))")
    else
      bind=(taskset -c "$((i % cpus))")
    fi
  fi
  for ((l = 0; l < per; l++)); do
    r=$((i * per + l))
    ip netns exec "$tag-h$i" ${bind[@]+"${bind[@]}"} env FABCOLL_RANK=$r FABCOLL_SIZE=$size FABCOLL_LOCAL_RANK=$l \
      FABCOLL_LOCAL_SIZE=$per FABCOLL_NODE="node$i" FABCOLL_TOKEN="$token" \
      FABCOLL_STORE="tcp://10.250.0.1:29600" timeout "$limit" "$@" \
      > >(sed -u "s/^/[$r] /") 2> >(sed -u "s/^/[$r] /" >&2) </dev/null &
    pids+=($!)
  done
done
if [ -n "$down_node" ]; then
  (sleep "$down_after" && ip -n "$tag-h$down_node" link set eth0 down && echo "netns-hosts: node $down_node's link down" >&2) &
  downer=$!
fi
status=0
for pid in "${pids[@]}"; do
  s=0
  wait "$pid" || s=$?
  if [ "$status" -eq 0 ]; then status=$s; fi
done
exit "$status"
