"""ElasticBuffer's own host time per call on the CPU: DeepEP V2's calls
against the V1 calls doing the same work (device/host_cost.py --elastic's
pairs: a V2 dispatch against V1's get_dispatch_layout + dispatch, a cached
dispatch and a combine against V1's), both over a V1 stand-in that replays
the outputs the simulated engine (elastic_sim.SimBuffer) gave once. The
stand-in costs next to nothing, so `overhead` is what ElasticBuffer adds to
the V1 calls; on a GPU the V1 calls themselves cost far more (their
kernels' launches and, with do_cpu_sync, the wait for the counts).

Not a test (timings vary with the machine); a CPU measurement, not a GPU
figure. Needs PyTorch (e.g. Debian's python3-torch):
    PYTHONPATH=python python3 tests/python/elastic_host_cost_sim.py [--iters N] [--profile]
"""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

import elastic_sim as sim  # noqa: E402

# host_cost.py's defaults.
RANKS, TOKENS, HIDDEN, TOPK, EXPERTS = 2, 8, 7168, 8, 256


def inputs(rank):
    g = torch.Generator().manual_seed(rank)
    x = torch.randn((TOKENS, HIDDEN), generator=g).to(torch.bfloat16)
    topk_idx = torch.topk(torch.rand((TOKENS, EXPERTS), generator=g), TOPK).indices
    return x, topk_idx, torch.rand((TOKENS, TOPK), generator=g)


def median_us(call, iters):
    samples = []
    for _ in range(iters + iters // 10):
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples[iters // 10:]) / 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="cProfile each V2 call instead of timing")
    args = parser.parse_args()

    world = sim.World(RANKS, RANKS)
    made = {}

    def record(rank):
        # Every rank makes the calls once (the simulated engine is collective).
        b = sim.make_buffer(world, rank, 128, TOPK)
        b._hidden = HIDDEN
        b.runtime = sim.Replay(b.runtime)
        x, topk_idx, topk_weights = inputs(rank)
        recv = b.dispatch(x, topk_idx=topk_idx, topk_weights=topk_weights, num_experts=EXPERTS)
        b.dispatch(x, handle=recv[3])
        b.combine(recv[0], recv[3])
        # The V1 calls of the pairs below, each kind once (V2's own entries
        # record under other kinds).
        v1 = b.runtime
        per_rank, _, per_expert, in_rank, _ = v1.get_dispatch_layout(topk_idx, EXPERTS)
        v1.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                    topk_idx=topk_idx, topk_weights=topk_weights)
        v1.dispatch(x, handle=recv[3]._v1)
        v1.combine(recv[0], recv[3]._v1)
        made[rank] = (b, x, topk_idx, topk_weights, recv)

    sim.run_ranks(world, record)
    b, x, topk_idx, topk_weights, recv = made[0]
    v1 = b.runtime
    v1.replaying = True
    handle = recv[3]

    def v1_dispatch():
        per_rank, _, per_expert, in_rank, _ = v1.get_dispatch_layout(topk_idx, EXPERTS)
        return v1.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                           num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights)

    pairs = {
        "dispatch": (v1_dispatch, lambda: b.dispatch(x, topk_idx=topk_idx, topk_weights=topk_weights,
                                                     num_experts=EXPERTS)),
        "dispatch (do_handle_copy=False)": (v1_dispatch, lambda: b.dispatch(
            x, topk_idx=topk_idx, topk_weights=topk_weights, num_experts=EXPERTS, do_handle_copy=False)),
        "cached_dispatch": (lambda: v1.dispatch(x, handle=handle._v1), lambda: b.dispatch(x, handle=handle)),
        "combine": (lambda: v1.combine(recv[0], handle._v1), lambda: b.combine(recv[0], handle)),
    }
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {RANKS} ranks (rank 0 timed), "
          f"{TOKENS} tokens, hidden {HIDDEN}, top-{TOPK}, {EXPERTS} experts; median of {args.iters} (us)")
    for name, (v1_call, v2_call) in pairs.items():
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(args.iters):
                v2_call()
            profile.disable()
            print(f"== {name}")
            pstats.Stats(profile).sort_stats("tottime").print_stats(12)
            continue
        v1_us, v2_us = median_us(v1_call, args.iters), median_us(v2_call, args.iters)
        print(f"{name:32s} V1 stand-in {v1_us:6.2f}  V2 {v2_us:6.2f}  overhead {v2_us - v1_us:6.2f}")


if __name__ == "__main__":
    main()
