"""The low-latency calls' Python objects through epkit.deep_ep's extension:
a dispatch and a combine with the receive hook give the bits of the same
calls without it; the hook runs once (a second call raises, naming it); a
handle that is not low_latency_dispatch's is refused with a TypeError; the
results have DeepEP's shapes (the tuple handle of five, an EventOverlap).

Usage: python low_latency_api.py --num-processes N
Prints `low_latency_api: N checks passed` on rank 0; exits non-zero on a failure.
"""

import argparse
import sys

import torch
import torch.distributed as dist

import common

import epkit.deep_ep as deep_ep

MAX_TOKENS, HIDDEN, TOPK, EXPERTS = 128, 7168, 8, 32


def main(local_rank, num_ranks, args):
    group = common.init(local_rank, num_ranks, args.port)
    rank = dist.get_rank()
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(MAX_TOKENS, HIDDEN, num_ranks, EXPERTS)
    buffer = deep_ep.Buffer(group, 0, hint, low_latency_mode=True, num_qps_per_rank=EXPERTS // num_ranks,
                            explicitly_destroy=True)
    failures, checks = [], 0

    def check(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(what)

    g = torch.Generator(device="cuda").manual_seed(7 + rank)
    for trial in range(3):
        tokens = (50, MAX_TOKENS, 1)[trial]
        x = torch.randn((tokens, HIDDEN), dtype=torch.bfloat16, device="cuda", generator=g)
        scores = torch.rand((tokens, EXPERTS), device="cuda", generator=g)
        topk_idx = torch.topk(scores, TOPK, dim=-1).indices.to(torch.int64)
        weights = torch.rand((tokens, TOPK), dtype=torch.float32, device="cuda", generator=g)
        results = {}
        for hooked in (False, True):
            recv, count, handle, event, hook = buffer.low_latency_dispatch(
                x, topk_idx, MAX_TOKENS, EXPERTS, use_fp8=False, return_recv_hook=hooked)
            check(isinstance(event, deep_ep.EventOverlap) and event.event is None, "dispatch event")
            check(isinstance(handle, tuple) and len(handle) == 5 and handle[2] == MAX_TOKENS and
                  handle[3] == HIDDEN and handle[4] == EXPERTS, f"handle {type(handle)}")
            if hooked:
                check(hook is not None, "dispatch hook missing")
                hook()
                try:
                    hook()
                    check(False, "a second hook call did not raise")
                except Exception as e:  # noqa: BLE001 - ValueError (extension), EPAssertionError (ctypes)
                    check("called already" in str(e), f"second hook call: {e}")
            else:
                check(hook is None, "a hook without return_recv_hook")
            recv = recv.clone()
            count = count.clone()
            out, event, hook = buffer.low_latency_combine(recv, topk_idx, weights, handle,
                                                          return_recv_hook=hooked)
            if hooked:
                hook()
            torch.cuda.synchronize()
            results[hooked] = (recv, count, out.clone())
        plain, hooked = results[False], results[True]
        counts_equal = torch.equal(plain[1], hooked[1])
        check(counts_equal, f"trial {trial}: recv_count differs with the hook")
        if counts_equal:
            rows_equal = all(torch.equal(plain[0][e, :int(plain[1][e])], hooked[0][e, :int(hooked[1][e])])
                             for e in range(plain[0].size(0)))
            check(rows_equal, f"trial {trial}: received rows differ with the hook")
        check(torch.equal(plain[2], hooked[2]), f"trial {trial}: combined rows differ with the hook")
    try:
        buffer.low_latency_combine(x, topk_idx, weights, (None,) * 5)
        check(False, "a foreign handle was taken")
    except TypeError as e:
        check("low_latency_dispatch" in str(e), f"foreign handle: {e}")
    dist.barrier()
    buffer.destroy()
    if failures:
        print(f"low_latency_api rank {rank}: FAIL: {'; '.join(failures)}", flush=True)
        sys.exit(1)
    if rank == 0:
        print(f"low_latency_api: {checks} checks passed (rank 0 of {num_ranks})", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--port", type=int, default=29641)
    args = parser.parse_args()
    torch.multiprocessing.spawn(main, args=(args.num_processes, args), nprocs=args.num_processes)
