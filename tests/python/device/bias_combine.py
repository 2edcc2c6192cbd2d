"""combine(bias=...) on one node through epkit.deep_ep, bitwise against the
sum DeepEP defines: BF16(FP32 bias_0 + bias_1, then each rank's row in rank
order, rounded once). Every rank dispatches random rows and combines the
received rows back, so each token's rows are its own x, once per rank it
reached. Both forms of `bias` (one tensor, a pair) and a combine without.

Usage: python bias_combine.py --num-processes N [--tokens 512] [--module epkit.deep_ep]
Prints `bias_combine: N checks passed` on rank 0; exits non-zero on a mismatch.
"""

import argparse
import importlib
import sys

import torch
import torch.distributed as dist

import common

HIDDEN, TOPK, EXPERTS = 7168, 8, 64


def expected(x, in_rank, biases):
    acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for b in biases:
        acc = acc + b.float()
    for r in range(in_rank.size(1)):
        acc = torch.where(in_rank[:, r:r + 1], acc + x.float(), acc)
    return acc.to(torch.bfloat16)


def main(local_rank, num_ranks, args):
    deep_ep = importlib.import_module(args.module)
    group = common.init(local_rank, num_ranks, args.port)
    rank = dist.get_rank()
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    buffer = deep_ep.Buffer(group, int(512e6), 0, explicitly_destroy=True)
    failures, checks = [], 0
    for trial in range(3):
        x = torch.randn((args.tokens, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
        scores = torch.rand((args.tokens, EXPERTS), device="cuda", generator=g)
        topk_idx = torch.topk(scores, TOPK).indices
        if trial == 2:  # some tokens routed nowhere: only the biases remain
            topk_idx[::5] = -1
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, EXPERTS)
        recv_x, _, _, _, handle, _ = buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                                     num_tokens_per_expert=per_expert, topk_idx=topk_idx)
        b0 = torch.randn((args.tokens, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
        b1 = torch.randn((args.tokens, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
        for bias, used in ((None, ()), (b0, (b0,)), ((b0, b1), (b0, b1))):
            combined, _, _ = buffer.combine(recv_x, handle, bias=bias)
            want = expected(x, in_rank, used)
            checks += 1
            if not torch.equal(combined.view(torch.int16), want.view(torch.int16)):
                bad = (combined.view(torch.int16) != want.view(torch.int16)).sum().item()
                failures.append(f"rank {rank} trial {trial} biases {len(used)}: {bad} elements differ")
    torch.cuda.synchronize()
    dist.barrier()
    buffer.destroy()
    counts = [None] * num_ranks
    dist.all_gather_object(counts, (checks, failures))
    if rank == 0:
        total = sum(c for c, _ in counts)
        bad = [f for _, fs in counts for f in fs]
        for f in bad:
            print("bias_combine:", f)
        print(f"bias_combine: {total - len(bad)} passed, {len(bad)} failed", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if any(fs for _, fs in counts):
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", default="epkit.deep_ep")
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--port", type=int, default=29641)
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    torch.multiprocessing.spawn(main, args=(args.num_processes, args), nprocs=args.num_processes)
