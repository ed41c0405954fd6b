"""Runs rank programs (tests/progs/*.py) as p processes of one fabcoll job, each with a hard timeout.

The ranks join through the `FABCOLL_*` environment (rank 0 serves the bootstrap store, as under torchrun), so the
tests need no launcher; one test runs under `fabrun` too when the binary is found (FABRUN, else the cargo target
directory). A job that does not finish in time is killed and fails its test.
"""

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "progs"
TIMEOUT_S = 120.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(prog, p, env=None, torch_env=False, args=(), timeout=TIMEOUT_S):
    """Runs `progs/<prog>` as ranks 0..p-1; returns their outputs. Fails when a rank fails or the job times out."""
    port, token = free_port(), secrets.token_hex(16)
    base = dict(os.environ)
    base.pop("FABCOLL_FABRIC", None)
    base.update(env or {})
    procs = []
    for r in range(p):
        e = dict(base)
        if torch_env:
            e.update(RANK=str(r), WORLD_SIZE=str(p), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(p),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        else:
            e.update(FABCOLL_RANK=str(r), FABCOLL_SIZE=str(p), FABCOLL_STORE=f"tcp://127.0.0.1:{port}",
                     FABCOLL_STORE_SERVER="rank0", FABCOLL_TOKEN=token)
        procs.append(subprocess.Popen([sys.executable, str(PROGS / prog), *args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            outs.append(out)
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        dumps = [proc.communicate()[0] for proc in procs]
        pytest.fail(f"{prog} at p = {p} did not finish within {timeout} s:\n" + "\n".join(dumps))
    bad = [(r, proc.returncode, out) for r, (proc, out) in enumerate(zip(procs, outs)) if proc.returncode != 0]
    if bad:
        pytest.fail("\n".join(f"rank {r} exited with {rc}:\n{out}" for r, rc, out in bad))
    return outs
