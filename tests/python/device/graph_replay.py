"""CUDA graphs through epkit.deep_ep (ranks may share one GPU).

A: cached dispatch (handle from an eager num_worst_tokens dispatch) + combine,
   captured with torch.cuda.graph, replayed with new x: bitwise equal to
   eager calls on the same x.
B: num_worst_tokens dispatch (top-k and layout inputs) + combine with the
   handle made inside the graph, replayed with new x, top-k and layout.
Usage: python graph_replay.py --num-processes N [--port P]
Prints "graph A: passed" / "graph B: passed" (rank 0) or fails.
"""

import argparse
import sys

import torch
import torch.distributed as dist

import common
import epkit.deep_ep as deep_ep

TOKENS, HIDDEN, TOPK, EXPERTS = 256, 7168, 8, 64


def inputs(rank, seed):
    g = torch.Generator(device="cuda").manual_seed(seed * 100 + rank)
    x = torch.randn((TOKENS, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
    scores = torch.rand((TOKENS, EXPERTS), device="cuda", generator=g) + 0.1
    topk_idx = torch.topk(scores, TOPK, dim=-1).indices.to(torch.int64)
    topk_idx[::7, -1] = -1  # some tokens pick fewer experts
    return x, topk_idx


def main(local_rank, num_ranks, port):
    group = common.init(local_rank, num_ranks, port)
    rank = dist.get_rank()
    buffer = deep_ep.Buffer(group, int(1e9), explicitly_destroy=True)
    worst = TOKENS * num_ranks
    config = deep_ep.Config(24, 8, 256)

    def full(x, topk_idx, layout):
        per_rank, _, per_expert, in_rank, _ = layout
        recv_x, recv_idx, _, _, handle, _ = buffer.dispatch(
            x, topk_idx=topk_idx, topk_weights=torch.ones(topk_idx.shape, dtype=torch.float32, device="cuda"),
            num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            num_worst_tokens=worst, config=config)
        combined, _, _ = buffer.combine(recv_x, handle, config=config)
        return recv_x, recv_idx, handle, combined

    def cached(x, handle):
        recv_x, _, _, _, _, _ = buffer.dispatch(x, handle=handle, config=config)
        combined, _, _ = buffer.combine(recv_x, handle, config=config)
        return recv_x, combined

    x0, idx0 = inputs(rank, 0)
    layout0 = buffer.get_dispatch_layout(idx0, EXPERTS)
    _, _, handle0, _ = full(x0, idx0, layout0)
    received = int(handle0[0][-1][rank].item())

    # A: capture cached dispatch + combine on static x.
    static_x = x0.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            cached(static_x, handle0)
    torch.cuda.current_stream().wait_stream(side)
    graph_a = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph_a):
        static_recv, static_combined = cached(static_x, handle0)
    failures = []
    for seed in (1, 2, 3):
        x, _ = inputs(rank, seed)
        static_x.copy_(x)
        graph_a.replay()
        torch.cuda.synchronize()
        got_recv, got_combined = static_recv[:received].clone(), static_combined.clone()
        eager_recv, eager_combined = cached(x, handle0)
        torch.cuda.synchronize()
        if not torch.equal(got_recv, eager_recv[:received]) or not torch.equal(got_combined, eager_combined):
            failures.append(f"A seed {seed}")

    # B: capture the whole num_worst_tokens dispatch + combine.
    s_x, s_idx = x0.clone(), idx0.clone()
    s_layout = [t.clone() if isinstance(t, torch.Tensor) else t for t in layout0[:4]]
    with torch.cuda.stream(side):
        for _ in range(2):
            full(s_x, s_idx, s_layout + [None])
    torch.cuda.current_stream().wait_stream(side)
    graph_b = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph_b):
        b_recv, b_idx, b_handle, b_combined = full(s_x, s_idx, s_layout + [None])
    for seed in (4, 5):
        x, idx = inputs(rank, seed)
        layout = buffer.get_dispatch_layout(idx, EXPERTS)
        s_x.copy_(x)
        s_idx.copy_(idx)
        for dst, src in zip(s_layout, layout[:4]):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        graph_b.replay()
        torch.cuda.synchronize()
        rows = int(b_handle[0][-1][rank].item())
        got = (b_recv[:rows].clone(), b_idx.clone(), b_combined.clone())
        e_recv, e_idx, e_handle, e_combined = full(x, idx, layout)
        torch.cuda.synchronize()
        if rows != int(e_handle[0][-1][rank].item()) or not torch.equal(got[0], e_recv[:rows]) or \
                not torch.equal(got[1], e_idx) or not torch.equal(got[2], e_combined):
            failures.append(f"B seed {seed}")

    ok = torch.tensor([0 if failures else 1], device="cuda")
    dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)
    if failures:
        print(f"rank {rank}: graph replay differs from eager: {failures}", flush=True)
    if rank == 0:
        a_ok = not any(f.startswith("A") for f in failures)
        b_ok = not any(f.startswith("B") for f in failures)
        print(f"graph A (cached dispatch + combine): {'passed' if a_ok else 'FAILED'}", flush=True)
        print(f"graph B (num_worst_tokens dispatch + combine): {'passed' if b_ok else 'FAILED'}", flush=True)
    buffer.destroy()
    dist.barrier()
    dist.destroy_process_group()
    if not ok.item():
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--port", type=int, default=29611)
    args = parser.parse_args()
    torch.multiprocessing.spawn(main, args=(args.num_processes, args.port), nprocs=args.num_processes)
