"""Host time per epkit.deep_ep call (tiny calls: 8 tokens, median of many),
from the Python call to its return after the kernels are queued.
Usage: python overhead.py --num-processes N [--tokens 8] [--iters 2000]
       [--cpp "ranks=2 ... layout_us=.. dispatch_us=.. cached_dispatch_us=.. combine_us=.."]
Rank 0 prints one table: Python (copy-out and zero-copy), the C++ API line
given with --cpp (from epkit_ep_call_overhead), and DeepEP's own Python path.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import common
import epkit.deep_ep as deep_ep

HIDDEN, TOPK, EXPERTS = 7168, 8, 256
# DeepEP V1's Python path, 8 tokens, H100 x1 with 2 ranks sharing it under MPS.
DEEPEP_US = {"layout": 43.9, "cached_dispatch": 93.2, "combine": 44.7}


def median_us(call, iters):
    samples = []
    for i in range(iters + iters // 10):
        t0 = time.perf_counter_ns()
        call()
        t1 = time.perf_counter_ns()
        if i >= iters // 10:
            samples.append((t1 - t0) / 1e3)
        if i % 50 == 49:  # keep queues short and ranks in step, untimed
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(samples)


def measure(buffer, tokens, iters, rank):
    g = torch.Generator(device="cuda").manual_seed(rank)
    x = torch.randn((tokens, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
    topk_idx = torch.topk(torch.rand((tokens, EXPERTS), device="cuda", generator=g), TOPK).indices
    topk_weights = torch.ones((tokens, TOPK), dtype=torch.float32, device="cuda")
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, EXPERTS)
    args = dict(topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=per_rank,
                is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    recv_x, _, _, _, handle, _ = buffer.dispatch(x, **args)
    recv_x = recv_x.clone()
    return {
        "layout": median_us(lambda: buffer.get_dispatch_layout(topk_idx, EXPERTS), iters),
        "dispatch": median_us(lambda: buffer.dispatch(x, **args), iters),
        "cached_dispatch": median_us(lambda: buffer.dispatch(x, handle=handle), iters),
        "combine": median_us(lambda: buffer.combine(recv_x, handle), iters),
    }


def main(local_rank, num_ranks, port, tokens, iters, cpp):
    group = common.init(local_rank, num_ranks, port)
    rank = dist.get_rank()
    rows = {}
    for zero_copy in (False, True):
        buffer = deep_ep.Buffer(group, 0, explicitly_destroy=True, max_tokens=max(tokens, 128), zero_copy=zero_copy)
        rows["python (zero_copy)" if zero_copy else "python (outputs copied)"] = measure(buffer, tokens, iters, rank)
        buffer.destroy()
    if cpp:
        fields = dict(f.split("=", 1) for f in cpp.split() if "=" in f)
        rows["C++ API"] = {op: float(fields.get(f"{op}_us", "nan")) for op in
                           ("layout", "dispatch", "cached_dispatch", "combine")}
    rows["DeepEP V1 python"] = {op: DEEPEP_US.get(op, float("nan")) for op in
                                ("layout", "dispatch", "cached_dispatch", "combine")}
    if rank == 0:
        dev = torch.cuda.get_device_name()
        print(f"host us per call, median of {iters}: {num_ranks} ranks, {tokens} tokens, hidden {HIDDEN}, "
              f"top-{TOPK}, {EXPERTS} experts, {dev}")
        print(f"| path | get_dispatch_layout | dispatch | cached dispatch | combine |")
        print(f"|---|---|---|---|---|")
        for name, r in rows.items():
            cells = " | ".join("-" if r[op] != r[op] else f"{r[op]:.1f}" for op in
                               ("layout", "dispatch", "cached_dispatch", "combine"))
            print(f"| {name} | {cells} |", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--port", type=int, default=29621)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--cpp", default="")
    args = parser.parse_args()
    torch.multiprocessing.spawn(main, args=(args.num_processes, args.port, args.tokens, args.iters, args.cpp),
                                nprocs=args.num_processes)
