"""PyTorch's all_to_all_single at the sizes of `epkit bench nccl alltoall`,
timed like it (CUDA events around -n iterations after -w warm-ups), so the
two figures can be compared in one device call.

    torchrun --nproc-per-node 4 scripts/device/alltoall_torch.py 16M 1G 4
"""
import os
import sys

import torch
import torch.distributed as dist


def parse(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main():
    lo, hi, factor = parse(sys.argv[1]), parse(sys.argv[2]), int(sys.argv[3])
    iters, warmup = 20, 5
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    n = dist.get_world_size()
    size = lo
    if rank == 0:
        print(f"# torch {torch.__version__} all_to_all_single, {n} ranks, NCCL "
              f"{'.'.join(map(str, torch.cuda.nccl.version()))}")
        print("#  bytes_per_rank  time_us  algbw_GBps  busbw_GBps")
    while size <= hi:
        count = size // 4 // n * n
        src = torch.ones(count, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        for _ in range(warmup):
            dist.all_to_all_single(dst, src)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            dist.all_to_all_single(dst, src)
        stop.record()
        torch.cuda.synchronize()
        us = start.elapsed_time(stop) * 1000 / iters
        t = torch.tensor([us], device="cuda")
        dist.all_reduce(t)
        us = t.item() / n
        algbw = count * 4 / (us * 1e-6) / 1e9
        if rank == 0:
            print(f"{count * 4:16d}  {us:7.1f}  {algbw:10.2f}  {algbw * (n - 1) / n:10.2f}")
        size *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
