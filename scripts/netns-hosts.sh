#!/usr/bin/env bash
# Runs a job as if on N machines: one network namespace per rank ("host"), each with its own
# interface (veth) on one bridge, optionally shaped with tc (tbf). Ranks start the way a cluster
# launcher starts them (no fabrun): FABCOLL_RANK/SIZE, LOCAL_RANK 0 and LOCAL_SIZE 1 (one rank per
# host), a shared token, and FABCOLL_STORE at host 0, whose rank serves the store. No fabric is
# named unless FABCOLL_FABRIC is set, so the ranks pick the default across hosts (tcp) and each
# finds its own address by the route to the store (FABCOLL_TCP_ADDR unset).
#
#   sudo scripts/netns-hosts.sh [-n N] [--rate RATE] [--timeout SECS] -- PROG [ARGS...]
#     -n N          ranks, one per namespace (default 2; at most 200)
#     --rate RATE   egress limit of every host's interface, tc tbf syntax (e.g. 10gbit, 1gbit);
#                   default: unshaped (veth speed)
#     --timeout S   kill the job after S seconds (default 300)
#
# Needs root (ip netns, ip link, tc from iproute2). Traffic stays inside namespaces this script
# creates (10.250.0.0/24); they are deleted on exit, also on failure or interrupt. Output lines
# are prefixed "[rank] "; the exit status is 0 when every rank exits 0, else the first failing
# rank's status (124 on timeout). The "hosts" share this machine's cores: with more ranks than
# cores, waiting ranks yield the core (FABCOLL_YIELD=1 unless set), which each rank, alone on its
# "host", could not know.
set -euo pipefail

n=2 rate="" limit=300
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "netns-hosts: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "netns-hosts: no program given (see --help)" >&2; exit 2; }
case "$n" in ''|*[!0-9]*) echo "netns-hosts: -n needs a number" >&2; exit 2 ;; esac
[ "$n" -ge 1 ] && [ "$n" -le 200 ] || { echo "netns-hosts: -n must be 1..200" >&2; exit 2; }
command -v ip >/dev/null || { echo "netns-hosts: needs ip (iproute2)" >&2; exit 2; }

tag="fc$$"          # unique per run: parallel runs do not collide
sw="$tag-sw"        # the switch: a namespace holding the bridge
cleanup() {
  for ((k = 0; k < n; k++)); do ip netns del "$tag-h$k" 2>/dev/null || true; done
  ip netns del "$sw" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for ((k = 0; k < n; k++)); do
  h="$tag-h$k"
  ip netns add "$h"
  ip link add "eth0" netns "$h" type veth peer name "p$k" netns "$sw"
  ip -n "$sw" link set "p$k" master br0 up
  ip -n "$h" addr add "10.250.0.$((k + 1))/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  if [ -n "$rate" ]; then
    tc -n "$h" qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
  fi
done

if [ -z "${FABCOLL_YIELD:-}" ] && [ "$n" -gt "$(nproc)" ]; then export FABCOLL_YIELD=1; fi
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
pids=()
for ((k = 0; k < n; k++)); do
  ip netns exec "$tag-h$k" env FABCOLL_RANK=$k FABCOLL_SIZE=$n FABCOLL_LOCAL_RANK=0 FABCOLL_LOCAL_SIZE=1 \
    FABCOLL_TOKEN="$token" FABCOLL_STORE="tcp://10.250.0.1:29600" timeout "$limit" "$@" \
    > >(sed -u "s/^/[$k] /") 2> >(sed -u "s/^/[$k] /" >&2) </dev/null &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  if ! wait "$pid"; then
    s=$?
    [ "$status" -eq 0 ] && status=$s
  fi
done
exit "$status"
