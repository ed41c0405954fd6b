"""The Python package: every collective against numpy references at p = 2 and 3 on shm and tcp, the error cases,
and the torch backend (operations, DDP, and DDP under torchrun against gloo). Each job runs as separate processes with a hard timeout (conftest)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROGS, TIMEOUT_S, free_port, run_job


def test_import_and_names():
    import fabcoll

    assert issubclass(fabcoll.Error, RuntimeError)
    assert "bfloat16" in fabcoll.DATATYPES and "float32" in fabcoll.DATATYPES
    assert "sum" in fabcoll.OPS


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
@pytest.mark.parametrize("p", [2, 3])
def test_collectives_against_numpy(fabric, p):
    outs = run_job("ops.py", p, env={"FABCOLL_FABRIC": fabric})
    for out in outs:
        assert f"ops ok {fabric}" in out, out


def test_bad_arguments_raise_fabcoll_error():
    for out in run_job("errors.py", 2):
        assert "errors ok" in out, out


def fabrun_binary():
    found = os.environ.get("FABRUN")
    if found:
        return found
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path(__file__).resolve().parents[2] / "target"))
    for profile in ("release", "debug"):
        if (target / profile / "fabrun").exists():
            return str(target / profile / "fabrun")
    return shutil.which("fabrun")


def test_joining_again_on_the_store_rank_0_serves():
    for out in run_job("rejoin.py", 3):
        assert "rejoin ok" in out, out


@pytest.mark.skipif(fabrun_binary() is None, reason="no fabrun binary (set FABRUN or build it)")
def test_under_fabrun():
    r = subprocess.run([fabrun_binary(), "-n", "2", sys.executable, str(PROGS / "ops.py")],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ops ok") == 2, r.stdout


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("p,fabric", [(2, "shm"), (3, "tcp")])
def test_torch_backend_operations(p, fabric):
    for out in run_job("torch_ops.py", p, torch_env=True, env={"FABCOLL_FABRIC": fabric}):
        assert "torch ok" in out, out


def test_fsdp2_losses_match_gloo():
    """FSDP2 on a CPU DeviceMesh (in-place all_gather_into_tensor, reduce_scatter_tensor, groups found by name):
    10 steps at p = 2 on fabcoll and on gloo; the losses agree within 1e-5 relative."""
    def losses(backend):
        outs = run_job("fsdp_losses.py", 2, torch_env=True, args=(backend,))
        line = [ln for ln in outs[0].splitlines() if ln.startswith("losses ")]
        assert len(line) == 1, outs[0]
        return json.loads(line[0][len("losses "):])

    ours, theirs = losses("fabcoll"), losses("gloo")
    assert len(ours) == len(theirs) == 10
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert abs(a - b) <= 1e-5 * abs(b), f"step {step}: fabcoll {a}, gloo {b}"
    assert theirs[-1] < theirs[0], "the model did not learn: the test would not tell backends apart"


def test_torch_group_timeout_bounds_a_collective():
    outs = run_job("torch_timeout.py", 2, torch_env=True)
    assert "timeout ok" in outs[0], outs[0]


def test_torch_backend_takes_shared_memory_on_one_machine():
    """Without FABCOLL_FABRIC, a group whose ranks share a machine runs on shm: the backend starts its groups with
    FABCOLL_RANK/SIZE and no local size, so the ranks' node identities decide (they once fell back to tcp)."""
    for out in run_job("torch_ops.py", 2, torch_env=True):
        assert "fabric shm" in out and "torch ok" in out, out



def torchrun_losses(backend, p, *extra):
    """Rank 0's per-step losses of `progs/ddp_losses.py` on `backend` (and `extra` arguments), launched by torchrun
    with p ranks."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(p), "--master-port",
           str(free_port()), str(PROGS / "ddp_losses.py"), backend, *extra]
    env = dict(os.environ)
    env.pop("FABCOLL_FABRIC", None)
    try:
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun on {backend} did not finish within {TIMEOUT_S} s:\n{e.stdout}")
    assert done.returncode == 0, done.stdout
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("losses ")]
    assert len(lines) == 1, done.stdout
    return json.loads(lines[0][len("losses "):])


def test_torchrun_ddp_losses_match_gloo():
    """Issue 36's DDP acceptance: torchrun, 4 ranks, 50 steps; the losses match gloo's within 1e-5 relative."""
    ours, theirs = torchrun_losses("fabcoll", 4), torchrun_losses("gloo", 4)
    assert len(ours) == len(theirs) == 50
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert abs(a - b) <= 1e-5 * abs(b), f"step {step}: fabcoll {a}, gloo {b}"
    assert theirs[-1] < theirs[0], "the model did not learn: the test would not tell backends apart"


def test_torchrun_ddp_with_sparse_embedding_gradients_matches_gloo():
    """DDP over a model with an embedding table of sparse gradients (all_reduced as sparse COO tensors, as gloo
    does), 3 ranks: the losses match gloo's within 1e-5 relative."""
    ours, theirs = torchrun_losses("fabcoll", 3, "sparse"), torchrun_losses("gloo", 3, "sparse")
    assert len(ours) == len(theirs) == 50
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert abs(a - b) <= 1e-5 * abs(b), f"step {step}: fabcoll {a}, gloo {b}"
    first, last = sum(theirs[:10]) / 10, sum(theirs[-10:]) / 10
    assert last < 0.95 * first, f"the model did not learn ({first} to {last}): the test would not tell backends apart"
