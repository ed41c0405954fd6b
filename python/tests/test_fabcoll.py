"""The Python package: every collective against numpy references at p = 2 and 3 on shm and tcp, the error cases,
and the torch backend (operations and DDP). Each job runs as separate processes with a hard timeout (conftest)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROGS, TIMEOUT_S, run_job


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


def test_ddp_matches_gloo():
    for out in run_job("ddp.py", 2, torch_env=True):
        assert "ddp ok" in out, out
