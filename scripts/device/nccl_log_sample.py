"""Make a real multi-rank NCCL log on a GPU node, for checking `epkit logs`.

Run: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,COLL NCCL_DEBUG_FILE=DIR/nccl.%h.%p.log \
     torchrun --nproc-per-node N scripts/device/nccl_log_sample.py
Each rank does a few all-reduces and an all-to-all, and checks the sums.
"""
import os

import torch
import torch.distributed as dist


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(3):
        print(f"iteration: {step}", flush=True)
        x = torch.full((1 << 20,), float(rank + 1), device="cuda")
        dist.all_reduce(x)
        expected = world * (world + 1) / 2
        assert torch.all(x == expected), (x[0].item(), expected)
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x)
    dist.barrier()
    dist.destroy_process_group()
    print(f"[{os.uname().nodename}:{rank}] OK", flush=True)


if __name__ == "__main__":
    main()
