"""Shared start of the device scripts: one process per rank (spawned), an
NCCL group, ranks sharing GPUs (rank % device count, with the test shim's
NCCL_HOSTID when several share one)."""

import os

import torch
import torch.distributed as dist


def init(local_rank: int, num_ranks: int, port: int):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ["NCCL_HOSTID"] = f"epkit-shared-gpu-rank{local_rank}"
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", world_size=num_ranks,
                            rank=local_rank)
    return dist.new_group(list(range(num_ranks)))
