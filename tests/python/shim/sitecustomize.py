"""Test-only launch shim: several ranks on one GPU (never part of the product).

Put this folder first on PYTHONPATH with EPKIT_SHARE_GPU=1 and every Python
process (including torch.multiprocessing.spawn's children) maps a test's
`torch.cuda.set_device(i)` and `init_process_group(device_id=cuda:i)` onto
GPU i % device_count, and gives each rank its own NCCL_HOSTID before the
process group starts, so NCCL accepts ranks that share a GPU. DeepEP's own
tests ran on one H100 the same way.
"""

import os

if os.environ.get("EPKIT_SHARE_GPU") == "1":
    import functools

    import torch
    import torch.distributed as dist

    _set_device = torch.cuda.set_device
    _init = dist.init_process_group

    def _shared(device):
        count = max(torch.cuda.device_count(), 1)
        if isinstance(device, torch.device):
            return torch.device("cuda", (device.index or 0) % count)
        if isinstance(device, str):
            return _shared(torch.device(device))
        return int(device) % count

    @functools.wraps(_set_device)
    def set_device(device):
        return _set_device(_shared(device))

    @functools.wraps(_init)  # keeps the signature tests inspect for device_id
    def init_process_group(*args, **kwargs):
        rank = kwargs.get("rank", os.environ.get("RANK", "0"))
        os.environ["NCCL_HOSTID"] = f"epkit-shared-gpu-rank{rank}"
        if kwargs.get("device_id") is not None:
            kwargs["device_id"] = _shared(kwargs["device_id"])
        return _init(*args, **kwargs)

    torch.cuda.set_device = set_device
    dist.init_process_group = init_process_group
