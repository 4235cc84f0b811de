"""Injects a GPU OOM into one rank of a spawned run, for the tests of how a rank's failure ends a run
(tests/test_baselines.py, tests/test_baselines_gpu.py). A spawned rank is a fresh interpreter, which a
monkeypatch in the test's process does not reach; Python imports this module at start-up when its folder
is on PYTHONPATH. It acts only where FAIL_RANK is set: that rank's FAIL_AT_BACKWARD-th backward raises
torch.OutOfMemoryError. torch.autograd.backward is patched, which Tensor.backward calls too."""
import os

if "FAIL_RANK" in os.environ:
    import torch
    import torch.autograd

    _backward, _calls = torch.autograd.backward, [0]

    def _backward_that_fails_on_one_rank(*args, **kwargs):
        import torch.distributed as dist
        if dist.is_initialized() and dist.get_rank() == int(os.environ["FAIL_RANK"]):
            _calls[0] += 1
            if _calls[0] == int(os.environ["FAIL_AT_BACKWARD"]):
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (injected by the test)")
        return _backward(*args, **kwargs)

    torch.autograd.backward = _backward_that_fails_on_one_rank
