"""One rank of the timeout test: init_process_group("fabcoll", timeout=2 s). First rank 1 joins an all_reduce 1 s
late: rank 0's ``wait(timeout=0.3 s)`` on it raises after about 0.3 s and a plain ``wait()`` then finishes it. Then
rank 1 stays alive but skips an all_reduce; rank 0's must fail naming rank 1 after about the group's timeout
(fabcoll's own default is 60 s), and rank 0 lets rank 1 go through torch's store. Prints "timeout ok" on rank 0."""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import fabcoll.torch  # noqa: F401: registers the backend

os.environ.pop("FABCOLL_TIMEOUT", None)
dist.init_process_group("fabcoll", init_method="env://", timeout=timedelta(seconds=2))
store = dist.distributed_c10d._get_default_store()
if dist.get_rank() == 0:
    x = torch.ones(4)
    work = dist.all_reduce(x, async_op=True)
    t = time.monotonic()
    try:
        work.wait(timeout=timedelta(milliseconds=300))
    except RuntimeError as e:
        took = time.monotonic() - t
        assert "did not finish within 0.3 s" in str(e), e
        assert 0.25 <= took < 0.9, f"wait(timeout=0.3 s) raised after {took:.2f} s"
    else:
        raise AssertionError("wait(timeout=0.3 s) returned before rank 1 joined")
    work.wait()
    assert torch.equal(x, torch.full((4,), 2.0)), x
    t = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
    except RuntimeError as e:
        took = time.monotonic() - t
        assert "[1]" in str(e), e
        assert 1.5 <= took < 10, f"the all_reduce failed after {took:.1f} s, not after the group's 2 s: {e}"
        print(f"timeout ok after {took:.1f} s", flush=True)
    else:
        raise AssertionError("the all_reduce without rank 1 succeeded")
    store.set("rank0 done", "1")
else:
    time.sleep(1)
    dist.all_reduce(torch.ones(4))
    store.wait(["rank0 done"], timedelta(seconds=60))
