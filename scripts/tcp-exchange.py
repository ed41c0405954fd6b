#!/usr/bin/env python3
"""The kernel's floor under an exchange between two nodes of the namespace bed: ranks 0 and 1 (one per node, started
by scripts/netns-hosts.sh --nodes 2 --per-node 1) each send N bytes to the other over a plain TCP connection while
receiving the other's N, ROUNDS times after a one-byte handshake; rank 0 prints the minimum, median and maximum time
of an exchange and the goodput at the median. No fabcoll: what any allreduce between two nodes (each must receive the
other's n bytes) cannot beat on that link.

    sudo scripts/netns-hosts.sh --nodes 2 --per-node 1 --rate 1gbit -- python3 scripts/tcp-exchange.py 16777216 10
"""

import os
import socket
import sys
import threading
import time

N, ROUNDS = int(sys.argv[1]), int(sys.argv[2])
PORT = 29700
rank = int(os.environ["FABCOLL_RANK"])
me, other = ("10.250.0.1", "10.250.0.2") if rank == 0 else ("10.250.0.2", "10.250.0.1")
listener = socket.create_server((me, PORT))
for _ in range(100):  # the peer's listener may not be up yet
    try:
        out = socket.create_connection((other, PORT))
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
else:
    raise SystemExit(f"tcp-exchange: rank {rank} cannot reach {other}:{PORT}")
inc, _ = listener.accept()
payload, scratch = bytearray(N), bytearray(1 << 20)


def receive(n):
    view = memoryview(scratch)
    while n > 0:
        got = inc.recv_into(view, min(len(scratch), n))
        if got == 0:
            raise SystemExit("tcp-exchange: the peer closed its connection")
        n -= got


times = []
for _ in range(ROUNDS):
    out.sendall(b"x")
    receive(1)
    start = time.perf_counter()
    sender = threading.Thread(target=out.sendall, args=(payload,))
    sender.start()
    receive(N)
    sender.join()
    times.append(time.perf_counter() - start)
if rank == 0:
    times.sort()
    median = times[len(times) // 2]
    print(f"exchange of {N} bytes each way, {ROUNDS} rounds: min {times[0] * 1e3:.1f} ms, median {median * 1e3:.1f} ms, "
          f"max {times[-1] * 1e3:.1f} ms; goodput at the median {N * 8 / median / 1e6:.0f} Mbit/s each way")
