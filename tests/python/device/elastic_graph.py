"""CUDA graphs through epkit.deep_ep.ElasticBuffer (DeepEP V2's API; ranks
may share one GPU).

Each case captures a do_cpu_sync=False dispatch (worst-case-sized outputs,
no host sync) and the combine of its handle with torch.cuda.graph, replays
it with new x, top-k and biases, and compares with eager calls on the same
inputs, bitwise:
  plain:  BF16, top-k weights, two biases (V2's summation order, the wide combine);
  expand: BF16, do_expand with expert_alignment 128 and zero padding, one bias;
  fp8:    FP8 with scales, no bias.
Usage: python elastic_graph.py --num-processes N [--port P]
Prints "elastic graph <case>: passed" (rank 0) or fails.
"""

import argparse
import sys

import torch
import torch.distributed as dist

import common
import epkit.deep_ep as deep_ep

TOKENS, HIDDEN, TOPK, EXPERTS = 128, 2048, 6, 32


def inputs(rank, seed, fp8):
    g = torch.Generator(device="cuda").manual_seed(seed * 100 + rank)
    x = torch.randn((TOKENS, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
    scores = torch.rand((TOKENS, EXPERTS), device="cuda", generator=g) + 0.1
    weights, topk_idx = torch.topk(scores, TOPK, dim=-1)
    topk_idx[::5, -1] = -1  # some tokens pick fewer experts
    weights = weights.float().masked_fill(topk_idx < 0, 0.0)
    bias = tuple(torch.randn((TOKENS, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
                 for _ in range(2))
    if fp8:
        amax = x.float().view(TOKENS, -1, 128).abs().amax(-1).clamp(min=1e-4)
        scales = amax / 448.0
        x8 = (x.float().view(TOKENS, -1, 128) / scales[..., None]).view(TOKENS, HIDDEN).to(torch.float8_e4m3fn)
        x = (x8, scales.contiguous())
    return x, topk_idx.to(torch.int64), weights, bias


def run_case(buffer, case, rank):
    fp8 = case == "fp8"
    expand = case == "expand"
    alignment = 128 if expand else 1

    def step(x, topk_idx, weights, bias):
        recv_x, recv_idx, recv_w, handle, _ = buffer.dispatch(
            x, topk_idx=topk_idx, topk_weights=weights, num_experts=EXPERTS, expert_alignment=alignment,
            do_cpu_sync=False, do_expand=expand, do_zero_padding=expand)
        data = recv_x[0] if fp8 else recv_x
        y = data.float().to(torch.bfloat16) if fp8 else data  # the "expert": identity
        use_bias = {"plain": bias, "expand": bias[0], "fp8": None}[case]
        combined, combined_w, _ = buffer.combine(y, handle, topk_weights=recv_w, bias=use_bias)
        psum = handle.psum_num_recv_tokens_per_scaleup_rank
        outs = [data, recv_idx, recv_w, combined, combined_w, psum, handle.recv_src_metadata]
        if fp8:
            outs.append(recv_x[1])
        return outs

    def rows_of(outs):
        return int(outs[5][-1].item())

    x0, idx0, w0, b0 = inputs(rank, 0, fp8)
    statics = [t.clone() if isinstance(t, torch.Tensor) else t for t in (x0, idx0, w0)]
    if fp8:
        statics[0] = (x0[0].clone(), x0[1].clone())
    s_bias = tuple(b.clone() for b in b0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(*statics, s_bias)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step(*statics, s_bias)

    failures = []
    for seed in (1, 2, 3):
        x, idx, w, bias = inputs(rank, seed, fp8)
        if fp8:
            statics[0][0].copy_(x[0])
            statics[0][1].copy_(x[1])
        else:
            statics[0].copy_(x)
        statics[1].copy_(idx)
        statics[2].copy_(w)
        for dst, src in zip(s_bias, bias):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        got = [t.clone() if t is not None else None for t in captured]
        eager = step(x, idx, w, bias)
        torch.cuda.synchronize()
        n = rows_of(eager)
        if rows_of(got) != n:
            failures.append(f"{case} seed {seed}: {rows_of(got)} rows replayed, {n} eager")
            continue
        meta = eager[6][:n]
        names = ["recv_x", "recv_topk_idx", "recv_topk_weights", "combined_x", "combined_topk_weights",
                 "psum", "recv_src_metadata", "recv_sf"]
        for name, a, b in zip(names, got, eager):
            if a is None or b is None:
                if (a is None) != (b is None):
                    failures.append(f"{case} seed {seed}: {name} present in one run only")
                continue
            if name in ("recv_x", "recv_topk_weights", "recv_sf") and expand:
                # The expanded rows that hold data: the slots named by the metadata.
                slots = meta[:, 2:].flatten().long()
                slots = slots[slots >= 0]
                a, b = a[slots], b[slots]
            elif name in ("recv_x", "recv_topk_idx", "recv_topk_weights", "recv_src_metadata", "recv_sf"):
                a, b = a[:n], b[:n]
            if not torch.equal(a, b):
                failures.append(f"{case} seed {seed}: {name} differs")
    return failures


def main(local_rank, num_ranks, port):
    group = common.init(local_rank, num_ranks, port)
    rank = dist.get_rank()
    buffer = deep_ep.ElasticBuffer(group, num_max_tokens_per_rank=TOKENS, hidden=HIDDEN, num_topk=TOPK,
                                   explicitly_destroy=True)
    failures = {}
    for case in ("plain", "expand", "fp8"):
        failures[case] = run_case(buffer, case, rank)
    bad = [f for fs in failures.values() for f in fs]
    ok = torch.tensor([0 if bad else 1], device="cuda")
    dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)
    if bad:
        print(f"rank {rank}: graph replay differs from eager: {bad}", flush=True)
    dist.barrier()
    if rank == 0:
        for case, fs in failures.items():
            print(f"elastic graph {case}: {'FAILED' if fs else 'passed'}", flush=True)
    buffer.destroy()
    dist.barrier()
    dist.destroy_process_group()
    if not ok.item():
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--port", type=int, default=29621)
    args = parser.parse_args()
    torch.multiprocessing.spawn(main, args=(args.num_processes, args.port), nprocs=args.num_processes)
