"""Host time per call of a DeepEP-style module, one script for both
libraries: the module is taken by name (`deep_ep` or `epkit.deep_ep`), so
DeepEP and epkit are called with the same lines.

Each call is timed on the host from the Python call to its return (kernels
queued); its outputs are dropped right away, as a model layer drops them;
the stream is synchronised every 50 calls outside the timed part; median of
--iters. 2 ranks, 8 tokens, hidden 7168, top-8, 256 experts by default.
--low-latency adds low_latency_dispatch / low_latency_combine, without and
with the receive hook (the hook call counted with its operation), the
combine also with its output given (`_out`: the C++ API's work).
--elastic (epkit.deep_ep only) times DeepEP V2's ElasticBuffer against the V1
calls doing the same work in the same process, interleaved call by call: a V2
dispatch against V1's get_dispatch_layout + dispatch, a V2 cached dispatch
and combine against V1's (v2_over_v1_*: the ratios).

--interleave deep_ep,epkit.deep_ep times the four normal-mode calls of several
libraries in one process, call by call, rotating which goes first (one line
per module: `host_cost_interleaved <module> <json>`).

--profile (with --elastic) prints, on rank 0, where each V1 and V2 call
spends its host time (cProfile, top functions by own time).

Usage: python host_cost.py --module epkit.deep_ep --num-processes 2
       [--tokens 8] [--iters 400] [--low-latency] [--elastic [--profile]] [--port P]
Rank 0 prints one line: `host_cost <module> <json>` (microseconds).
"""

import argparse
import cProfile
import importlib
import io
import pstats
import json
import statistics
import time

import torch
import torch.distributed as dist

import common

HIDDEN, TOPK, EXPERTS, LL_MAX_TOKENS = 7168, 8, 256, 128


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


def rotating_medians(groups, iters):
    """Medians of calls timed one after another within each group, the
    group's order rotating every iteration (the drift of a shared machine,
    and which call goes first, move all of a group alike); the stream
    synchronised every 50 iterations, untimed. groups: lists of (name, call)."""
    samples = {name: [] for group in groups for name, _ in group}
    for i in range(iters + iters // 10):
        for group in groups:
            shift = i % len(group)
            for name, call in group[shift:] + group[:shift]:
                t0 = time.perf_counter_ns()
                call()
                t1 = time.perf_counter_ns()
                if i >= iters // 10:
                    samples[name].append((t1 - t0) / 1e3)
        if i % 50 == 49:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in samples.items()}


def inputs(tokens, rank):
    g = torch.Generator(device="cuda").manual_seed(rank)
    x = torch.randn((tokens, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
    scores = torch.rand((tokens, EXPERTS), device="cuda", generator=g)
    topk_idx = torch.topk(scores, TOPK).indices
    topk_weights = torch.rand((tokens, TOPK), dtype=torch.float32, device="cuda", generator=g)
    return x, topk_idx, topk_weights


def normal(deep_ep, group, tokens, iters, rank):
    buffer = deep_ep.Buffer(group, int(256e6), 0, explicitly_destroy=True)
    x, topk_idx, topk_weights = inputs(tokens, rank)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, EXPERTS)
    args = dict(topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=per_rank,
                is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    recv_x, _, _, _, handle, _ = buffer.dispatch(x, **args)
    out = {
        "layout": median_us(lambda: buffer.get_dispatch_layout(topk_idx, EXPERTS), iters),
        "dispatch": median_us(lambda: buffer.dispatch(x, **args), iters),
        "cached_dispatch": median_us(lambda: buffer.dispatch(x, handle=handle), iters),
        "combine": median_us(lambda: buffer.combine(recv_x, handle), iters),
    }
    if hasattr(buffer, "path"):
        out["path"] = buffer.path
    dist.barrier()
    buffer.destroy()
    return out


def interleaved(modules, group, tokens, iters):
    """normal()'s four calls for several libraries in one process, call by
    call, the order of the libraries rotating every iteration: the drift of
    a shared machine, and which library ran first, move all alike."""
    x, topk_idx, topk_weights = inputs(tokens, dist.get_rank())
    cases = []
    for name, deep_ep in modules:
        buffer = deep_ep.Buffer(group, int(256e6), 0, explicitly_destroy=True)
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, EXPERTS)
        args = dict(topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=per_rank,
                    is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
        recv_x, _, _, _, handle, _ = buffer.dispatch(x, **args)
        calls = {"layout": lambda b=buffer: b.get_dispatch_layout(topk_idx, EXPERTS),
                 "dispatch": lambda b=buffer, a=args: b.dispatch(x, **a),
                 "cached_dispatch": lambda b=buffer, h=handle: b.dispatch(x, handle=h),
                 "combine": lambda b=buffer, r=recv_x, h=handle: b.combine(r, h)}
        cases.append((name, buffer, calls))
    ops = ("layout", "dispatch", "cached_dispatch", "combine")
    medians = rotating_medians([[((name, op), calls[op]) for name, _, calls in cases] for op in ops], iters)
    result = {}
    for name, buffer, _ in cases:
        result[name] = {op: medians[(name, op)] for op in ops}
        if hasattr(buffer, "path"):
            result[name]["path"] = buffer.path
    dist.barrier()
    for _, buffer, _ in cases:
        buffer.destroy()
    return result


def low_latency(deep_ep, group, tokens, iters, rank, num_ranks):
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(LL_MAX_TOKENS, HIDDEN, num_ranks, EXPERTS)
    buffer = deep_ep.Buffer(group, 0, hint, low_latency_mode=True, num_qps_per_rank=EXPERTS // num_ranks,
                            explicitly_destroy=True)
    x, topk_idx, topk_weights = inputs(tokens, rank)
    expert_out = torch.randn((EXPERTS // num_ranks, num_ranks * LL_MAX_TOKENS, HIDDEN), dtype=torch.bfloat16,
                             device="cuda")
    # A combine allocates its output unless given one (`out=`): the C++
    # API's figure writes into a given one, so the _out columns are the
    # same work as the C++ API's.
    given = torch.empty((tokens, HIDDEN), dtype=torch.bfloat16, device="cuda")
    samples = {name: [] for name in ("ll_dispatch", "ll_dispatch_hook", "ll_combine", "ll_combine_hook",
                                     "ll_combine_out", "ll_combine_hook_out")}
    for i in range(iters + iters // 10):
        for hooked in (False, True):
            for out in (None, given):
                suffix = ("_hook" if hooked else "") + ("_out" if out is not None else "")
                t0 = time.perf_counter_ns()
                _, _, handle, _, hook = buffer.low_latency_dispatch(x, topk_idx, LL_MAX_TOKENS, EXPERTS,
                                                                    use_fp8=True, return_recv_hook=hooked)
                if hooked:
                    hook()
                t1 = time.perf_counter_ns()
                _, _, hook = buffer.low_latency_combine(expert_out, topk_idx, topk_weights, handle,
                                                        return_recv_hook=hooked, out=out)
                if hooked:
                    hook()
                t2 = time.perf_counter_ns()
                if i >= iters // 10:
                    samples["ll_dispatch" + ("_hook" if hooked else "")].append((t1 - t0) / 1e3)
                    samples["ll_combine" + suffix].append((t2 - t1) / 1e3)
        if i % 50 == 49:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    dist.barrier()
    buffer.destroy()
    return {k: statistics.median(v) for k, v in samples.items()}


def profiled(name, call, iters, rank):
    """median_us, under cProfile on rank 0 when asked (--profile)."""
    if not PROFILE or rank != 0:
        return median_us(call, iters)
    profile = cProfile.Profile()
    profile.enable()
    value = median_us(call, iters)
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(22)
    print(f"== profile {name} ({iters + iters // 10} calls)\n{text.getvalue()}", flush=True)
    return value


PROFILE = False


def elastic(deep_ep, group, tokens, iters, rank, num_ranks):
    """V2's calls against V1's doing the same work, interleaved call by call
    (which goes first alternating), both Buffers alive: the drift of a
    shared machine moves both alike, so the ratio is read within a round."""
    x, topk_idx, topk_weights = inputs(tokens, rank)
    v1 = deep_ep.Buffer(group, int(256e6), 0, explicitly_destroy=True)
    v2 = deep_ep.ElasticBuffer(group, num_max_tokens_per_rank=max(tokens, 128), hidden=HIDDEN, num_topk=TOPK,
                               explicitly_destroy=True)

    def v1_dispatch():
        per_rank, _, per_expert, in_rank, _ = v1.get_dispatch_layout(topk_idx, EXPERTS)
        return v1.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                           num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights)

    def v2_dispatch():
        return v2.dispatch(x, topk_idx=topk_idx, topk_weights=topk_weights, num_experts=EXPERTS)

    recv_x, _, _, _, handle, _ = v1_dispatch()
    recv = v2_dispatch()
    v2_handle = recv[3]
    calls = {"v1_dispatch": v1_dispatch, "v2_dispatch": v2_dispatch,
             "v1_cached_dispatch": lambda: v1.dispatch(x, handle=handle),
             "v2_cached_dispatch": lambda: v2.dispatch(x, handle=v2_handle),
             "v1_combine": lambda: v1.combine(recv_x, handle),
             "v2_combine": lambda: v2.combine(recv[0], v2_handle)}
    pairs = [("v1_dispatch", "v2_dispatch"), ("v1_cached_dispatch", "v2_cached_dispatch"),
             ("v1_combine", "v2_combine")]
    out = rotating_medians([[(a, calls[a]), (b, calls[b])] for a, b in pairs], iters)
    for a, b in pairs:
        out[b.replace("v2_", "v2_over_v1_")] = round(out[b] / out[a], 3)
    if PROFILE:
        for a, b in pairs:
            profiled(a, calls[a], iters, rank)
            profiled(b, calls[b], iters, rank)
    dist.barrier()
    v1.destroy()
    v2.destroy()
    return out


def main(local_rank, num_ranks, args):
    global PROFILE
    PROFILE = args.profile
    group = common.init(local_rank, num_ranks, args.port)
    rank = dist.get_rank()
    if args.interleave:
        names = args.interleave.split(",")
        result = interleaved([(n, importlib.import_module(n)) for n in names], group, args.tokens, args.iters)
        if rank == 0:
            for n in names:
                print(f"host_cost_interleaved {n} {json.dumps(result[n])}", flush=True)
        dist.barrier()
        dist.destroy_process_group()
        return
    deep_ep = importlib.import_module(args.module)
    result = normal(deep_ep, group, args.tokens, args.iters, rank)
    if args.low_latency:
        result.update(low_latency(deep_ep, group, args.tokens, args.iters, rank, num_ranks))
    if args.elastic:
        result.update(elastic(deep_ep, group, args.tokens, args.iters, rank, num_ranks))
    if rank == 0:
        result.update(ranks=num_ranks, tokens=args.tokens, iters=args.iters, device=torch.cuda.get_device_name())
        print(f"host_cost {args.module} {json.dumps(result)}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", default="epkit.deep_ep", help="deep_ep or epkit.deep_ep")
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--port", type=int, default=29621)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--iters", type=int, default=400)
    parser.add_argument("--low-latency", action="store_true")
    parser.add_argument("--elastic", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--interleave", default="",
                        help="modules timed in one process call by call, e.g. deep_ep,epkit.deep_ep")
    args = parser.parse_args()
    torch.multiprocessing.spawn(main, args=(args.num_processes, args), nprocs=args.num_processes)
