"""ElasticBuffer's dispatch and combine on the CPU against DeepEP V2's
semantics, with the V1 engine stood in for (needs PyTorch; skipped without).

The stand-in `SimBuffer` does what the V1 engine does, in one process with
a thread per rank: rows arrive by source rank, then token; non-local top-k
entries are -1 with weight 0; worst-case rows are padded (-1, 0, and NaN
data to catch any read of them); combine sums in FP32 in rank order (across
nodes: a node's ranks, rounded to BF16, then the nodes, biases first) and
refuses biases on one node. The reference is V2's, written from its test's
definition: each destination rank's partial sum in top-k order, the
partials added in the order of each rank's last top-k slot (across nodes in
hybrid mode, a node's partials first, rounded), biases first; expanded rows
per expert padded to expert_alignment.
"""

import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))

try:
    import torch
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

import epkit.deep_ep as deep_ep  # noqa: E402
from epkit.deep_ep import elastic  # noqa: E402
from epkit.deep_ep.buffer import layout_then_dispatch  # noqa: E402

HIDDEN = 128


class World:
    """What the ranks' threads share: a barrier and one slot per rank."""

    def __init__(self, ranks, per_node):
        self.ranks, self.per_node = ranks, per_node
        self.barrier = threading.Barrier(ranks)
        self.slots = [None] * ranks

    def exchange(self, rank, value):
        self.barrier.wait()
        self.slots[rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


class SimHandle(tuple):
    pass


class SimBuffer:
    """The V1 Buffer's public methods, as the engine behaves."""

    def __init__(self, world, rank, max_tokens):
        self.world, self.rank, self.max_tokens = world, rank, max_tokens
        self.nodes = world.ranks // world.per_node

    def get_dispatch_layout(self, topk_idx, num_experts):
        per_rank_experts = num_experts // self.world.ranks
        owner = torch.where(topk_idx >= 0, topk_idx // per_rank_experts, -1)
        in_rank = torch.stack([(owner == r).any(1) for r in range(self.world.ranks)], 1)
        per_rank = in_rank.sum(0).to(torch.int32)
        per_expert = torch.stack([(topk_idx == e).sum() for e in range(num_experts)]).to(torch.int32)
        per_node = None
        if self.nodes > 1:
            in_node = in_rank.view(-1, self.nodes, self.world.per_node).any(2)
            per_node = in_node.sum(0).to(torch.int32)
        return per_rank, per_node, per_expert, in_rank, None

    def _layout_and_copy(self, topk_idx, num_experts):
        # The engine's layout kernel writes the copy as it reads topk_idx.
        return self.get_dispatch_layout(topk_idx, num_experts)[:4] + (topk_idx.clone(),)

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None, topk_weights=None,
                 expert_alignment=1, num_worst_tokens=0, config=None):
        assert not isinstance(x, tuple), "the CPU simulation has no FP8"
        cached = handle is not None
        if cached:
            is_token_in_rank = handle.in_rank
            topk_idx, topk_weights = handle.topk_idx, handle.topk_weights
            num_worst_tokens = handle.worst
            experts = handle.experts
        else:
            experts = num_tokens_per_expert.size(0)
        everyone = self.world.exchange(self.rank, (x, is_token_in_rank, topk_idx, topk_weights))
        epr = experts // self.world.ranks
        first = self.rank * epr
        rows, src, idx, w, per_src = [], [], [], [], []
        for s, (xs, in_rank, ti, tw) in enumerate(everyone):
            tokens = in_rank[:, self.rank].nonzero().flatten()
            per_src.append(tokens.numel())
            rows.append(xs[tokens])
            src.append(tokens.to(torch.int32))
            local = ti[tokens]
            hit = (local >= first) & (local < first + epr)
            idx.append(torch.where(hit, local - first, torch.full_like(local, -1)))
            w.append(torch.where(hit, tw[tokens], torch.zeros_like(tw[tokens])))
        recv_x, recv_src = torch.cat(rows), torch.cat(src)
        recv_idx, recv_w = torch.cat(idx), torch.cat(w)
        n = recv_x.size(0)
        if num_worst_tokens:
            pad = num_worst_tokens - n
            recv_x = torch.cat([recv_x, torch.full((pad, recv_x.size(1)), float("nan"), dtype=recv_x.dtype)])
            recv_src = torch.cat([recv_src, torch.full((pad,), 12345, dtype=torch.int32)])
            recv_idx = torch.cat([recv_idx, torch.full((pad, recv_idx.size(1)), -1, dtype=recv_idx.dtype)])
            recv_w = torch.cat([recv_w, torch.zeros((pad, recv_w.size(1)), dtype=torch.float32)])
        if cached:
            return recv_x, None, None, None, None, None
        counts = [] if num_worst_tokens else \
            [elastic.align(int((recv_idx == e).sum()), expert_alignment) for e in range(epr)]
        prefix = torch.cumsum(torch.tensor(per_src), 0).to(torch.int32)
        if self.nodes == 1:
            matrix = torch.zeros((self.world.ranks, self.world.ranks), dtype=torch.int32)
            matrix[:, self.rank] = prefix
            items = (matrix, None, None, recv_src, is_token_in_rank, None)
        else:
            items = (is_token_in_rank, None, None, None, None, None, prefix, None, None, None)
        h = SimHandle(items)
        h.in_rank, h.topk_idx, h.topk_weights, h.worst, h.experts = \
            is_token_in_rank, topk_idx, topk_weights, num_worst_tokens, experts
        h.rows_by_src = [(s, int(t)) for s, (_, in_rank, _, _) in enumerate(everyone)
                         for t in in_rank[:, self.rank].nonzero().flatten()]
        return recv_x, recv_idx, recv_w, counts, h, None

    # The V1 Buffer's entries for ElasticBuffer (the extension's fast calls):
    # as the public methods here.
    def _cached_recv_x(self, x, handle, config):
        return self.dispatch(x, handle=handle, config=config)[0]

    def _dispatch_plain(self, x, x_scales, per_rank, per_node, in_rank, per_expert, topk_idx, topk_weights,
                        expert_alignment, num_worst_tokens, config):
        return self.dispatch(x if x_scales is None else (x, x_scales), num_tokens_per_rank=per_rank,
                             num_tokens_per_rdma_rank=per_node, is_token_in_rank=in_rank,
                             num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights,
                             expert_alignment=expert_alignment, num_worst_tokens=num_worst_tokens, config=config)

    def _layout_dispatch(self, *args):
        # The extension's one call, as the ctypes path makes it.
        return layout_then_dispatch(self, *args)

    def _combine_plain(self, x, handle, topk_weights, bias, config):
        return self.combine(x, handle, topk_weights=topk_weights, bias=bias, config=config)[:2]

    def combine(self, x, handle, topk_weights=None, bias=None, config=None):
        b0, b1 = bias if isinstance(bias, tuple) else (bias, None)
        if (b0 is not None or b1 is not None) and self.nodes == 1:
            raise NotImplementedError("combine with bias on one node")
        everyone = self.world.exchange(self.rank, (x, topk_weights, handle.rows_by_src))
        n, width = handle.in_rank.size(0), x.size(1)
        per_rank = [dict() for _ in range(self.world.ranks)]
        for r, (xr, wr, rows) in enumerate(everyone):
            for i, (s, t) in enumerate(rows):
                if s == self.rank:
                    per_rank[r][t] = (xr[i].float(), None if wr is None else wr[i])
        out = torch.zeros((n, width), dtype=torch.bfloat16)
        out_w = None if topk_weights is None else torch.zeros((n, topk_weights.size(1)), dtype=torch.float32)
        for t in range(n):
            node_sums = []
            for node in range(self.nodes):
                acc = torch.zeros(width, dtype=torch.float32)
                acc_w = None if out_w is None else torch.zeros(out_w.size(1), dtype=torch.float32)
                hit = False
                for r in range(node * self.world.per_node, (node + 1) * self.world.per_node):
                    if t in per_rank[r]:
                        acc = acc + per_rank[r][t][0]
                        if acc_w is not None:
                            acc_w = acc_w + per_rank[r][t][1]
                        hit = True
                node_sums.append((hit, acc, acc_w))
            if self.nodes == 1:
                out[t] = node_sums[0][1].to(torch.bfloat16)
                if out_w is not None:
                    out_w[t] = node_sums[0][2]
                continue
            acc = torch.zeros(width, dtype=torch.float32)
            for b in (b0, b1):
                if b is not None:
                    acc = acc + b[t].float()
            acc_w = None if out_w is None else torch.zeros(out_w.size(1), dtype=torch.float32)
            for hit, s, sw in node_sums:
                if hit:
                    acc = acc + s.to(torch.bfloat16).float()
                    if acc_w is not None:
                        acc_w = acc_w + sw
            out[t] = acc.to(torch.bfloat16)
            if out_w is not None:
                out_w[t] = acc_w
        return out, out_w, None


def make_buffer(world, rank, max_tokens, max_topk, hybrid=True, multiple_reduction=True, exact=True):
    b = deep_ep.ElasticBuffer.__new__(deep_ep.ElasticBuffer)
    b._torch = torch
    b.group = None
    b.rank_idx, b.num_ranks = rank, world.ranks
    b.num_nvlink_ranks, b.num_rdma_ranks = world.per_node, world.ranks // world.per_node
    b.allow_hybrid_mode, b.allow_multiple_reduction, b.exact_combine_order = hybrid, multiple_reduction, exact
    b.deterministic = False
    if hybrid and b.num_rdma_ranks > 1:
        b.num_scaleout_ranks, b.num_scaleup_ranks = b.num_rdma_ranks, b.num_nvlink_ranks
    else:
        b.num_scaleout_ranks, b.num_scaleup_ranks = 1, b.num_ranks
    b.num_allocated_qps = 65 if hybrid else 17
    b._hidden, b._max_topk = HIDDEN, max_topk
    b._width = elastic.combine_width(b.num_ranks, max_topk, multiple_reduction, exact)
    b.num_max_tokens_per_rank = max_tokens
    b._configs = {}
    b.explicitly_destroy = True
    b.runtime = SimBuffer(world, rank, max_tokens)
    return b


def spread_values(shape, generator=None):
    """BF16 values that make the summation order show in the bits: half are
    +-2^10, which cancel, the rest small (~2^-16), which an FP32 sum keeps or
    loses depending on when the large ones cancel. (A few BF16 numbers of
    similar magnitude add exactly in FP32 in any order.)"""
    big = torch.rand(shape, generator=generator) < 0.5
    sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
    small = torch.randn(shape, generator=generator) * 2.0 ** -16
    return torch.where(big, sign * 1024.0, small).to(torch.bfloat16)


def token_value(global_token, k, hidden):
    """V2's test gives each (source token, slot) its own BF16 row."""
    g = torch.Generator().manual_seed(global_token * 131 + k)
    return spread_values((hidden,), g)


def run_ranks(world, fn):
    results, errors = [None] * world.ranks, []

    def body(rank):
        try:
            results[rank] = fn(rank)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append((rank, e))
            world.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0][1]
    return results


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class AgainstV2Semantics(unittest.TestCase):
    def case(self, ranks, per_node, topk, experts, alignment, bias_count, sync, hybrid=True,
             multiple_reduction=True, exact=True, masked=True, seed=0):
        torch.manual_seed(seed)
        world = World(ranks, per_node)
        max_tokens = 12
        tokens = [max_tokens - (r % 3) for r in range(ranks)]
        inputs = []
        for r in range(ranks):
            scores = torch.rand((tokens[r], experts))
            weights, idx = torch.topk(scores, topk, dim=-1)
            if masked:
                idx[::4, -1] = -1
                weights = weights.masked_fill(idx < 0, 0.0)
            x = torch.randn((tokens[r], HIDDEN)).to(torch.bfloat16)
            bias = tuple(spread_values((tokens[r], HIDDEN)) for _ in range(bias_count))
            inputs.append((x, idx.to(torch.int64), weights.float(), bias))
        epr = experts // ranks

        def rank_main(rank):
            buf = make_buffer(world, rank, max_tokens, max(topk, 2), hybrid, multiple_reduction, exact)
            x, idx, w, bias = inputs[rank]
            bias_arg = None if not bias else (bias[0] if len(bias) == 1 else bias)
            out = {}
            stats = torch.full((epr,), 5, dtype=torch.int32)
            for expand in (False, True):
                recv_x, recv_idx, recv_w, h, event = buf.dispatch(
                    x, topk_idx=idx, topk_weights=w, num_experts=experts, expert_alignment=alignment,
                    do_cpu_sync=sync, do_expand=expand, do_zero_padding=expand, num_sms=20,
                    cumulative_local_expert_recv_stats=None if expand else stats)
                n = int(h.psum_num_recv_tokens_per_scaleup_rank[-1])
                meta = h.recv_src_metadata
                # The combine input as V2's test builds it.
                src = meta[:n, 0].long()
                y = torch.stack([torch.stack([token_value(int(g), k, HIDDEN) for k in range(topk)])
                                 for g in src]) if n else torch.zeros((0, topk, HIDDEN), dtype=torch.bfloat16)
                local = (meta[:n, 2:] >= 0) if expand else (recv_idx[:n] >= 0)
                y = y.masked_fill(~local[..., None], 0)
                if expand:
                    cx = torch.full((recv_x.size(0) + 1, HIDDEN), float("nan")).to(torch.bfloat16)
                    slots = meta[:n, 2:].long()
                    cx[torch.where(slots >= 0, slots, recv_x.size(0)).flatten()] = y.view(-1, HIDDEN)
                    cx = cx[:-1].contiguous()
                    cw = recv_w if multiple_reduction else None
                else:
                    acc = torch.zeros((n, HIDDEN))
                    for k in range(topk):
                        acc += y[:, k].float()
                    cx = torch.full((recv_x.size(0), HIDDEN), float("nan")).to(torch.bfloat16)
                    cx[:n] = acc.to(torch.bfloat16)
                    cw = recv_w
                combined, combined_w, _ = buf.combine(cx, h, topk_weights=cw, bias=bias_arg)
                cached = buf.dispatch(x, handle=h, topk_weights=w if expand else None, do_expand=expand,
                                      do_zero_padding=expand)
                out[expand] = dict(stats=stats, recv_x=recv_x, recv_idx=recv_idx, recv_w=recv_w, h=h, n=n,
                                   combined=combined, combined_w=combined_w, cached=cached, event=event)
            return out

        results = run_ranks(world, rank_main)
        hybrid_sum = hybrid and ranks // per_node > 1 and multiple_reduction
        for rank in range(ranks):
            self.check_dispatch(results, inputs, rank, ranks, per_node, topk, epr, alignment, sync, hybrid)
            x, idx, w, bias = inputs[rank]
            for expand in (False, True):
                r = results[rank][expand]
                per_slot = expand and not multiple_reduction
                ref = self.reference(rank, idx, bias, topk, epr, per_node, ranks, max_tokens,
                                     local=not per_slot, node=hybrid_sum and not per_slot)
                self.assertTrue(torch.equal(r["combined"], ref),
                                f"rank {rank} expand={expand}: combine differs from V2's order "
                                f"({(r['combined'].float() - ref.float()).abs().max()})")
                if r["combined_w"] is not None:
                    self.assertTrue(torch.equal(r["combined_w"], w), f"rank {rank}: combined weights")

    def reference(self, rank, idx, bias, topk, epr, per_node, ranks, max_tokens, local, node):
        """V2's combine of the values token_value gives, for this rank's tokens."""
        out = []
        for t in range(idx.size(0)):
            g = rank * max_tokens + t
            ys = [token_value(g, k, HIDDEN) if idx[t, k] >= 0 else torch.zeros(HIDDEN, dtype=torch.bfloat16)
                  for k in range(topk)]
            owner = [int(idx[t, k]) // epr if idx[t, k] >= 0 else -1 for k in range(topk)]

            def grouped(values, group):
                result = [torch.zeros(HIDDEN, dtype=torch.bfloat16) for _ in range(topk)]
                for key in sorted(set(group)):
                    members = [k for k in range(topk) if group[k] == key]
                    acc = torch.zeros(HIDDEN)
                    for k in members:
                        acc = acc + values[k].float()
                    result[members[-1]] = acc.to(torch.bfloat16)
                return result

            if local:
                ys = grouped(ys, owner)
            if node:
                ys = grouped(ys, [o // per_node if o >= 0 else -1 for o in owner])
            acc = torch.zeros(HIDDEN)
            if len(bias) == 2:
                acc = bias[0][t].float() + bias[1][t].float()
            elif len(bias) == 1:
                acc = bias[0][t].float()
            for k in range(topk):
                acc = acc + ys[k].float()
            out.append(acc.to(torch.bfloat16))
        return torch.stack(out)

    def check_dispatch(self, results, inputs, rank, ranks, per_node, topk, epr, alignment, sync, hybrid):
        plain, expanded = results[rank][False], results[rank][True]
        n = plain["n"]
        first = rank * epr
        # The reference rows: every source's tokens with an expert here, by (source, token).
        ref = []
        for s, (x, idx, w, _) in enumerate(inputs):
            for t in range(idx.size(0)):
                hit = (idx[t] >= first) & (idx[t] < first + epr)
                if hit.any():
                    ref.append((s * 12 + t, x[t], torch.where(hit, idx[t] - first, -1), w[t], hit))
        self.assertEqual(n, len(ref))
        h = plain["h"]
        meta = h.recv_src_metadata
        self.assertEqual(meta[:n, 0].tolist(), [g for g, *_ in ref])
        self.assertTrue(bool((meta[n:] == -1).all()))
        for i, (g, x, li, w, hit) in enumerate(ref):
            self.assertTrue(torch.equal(plain["recv_x"][i], x))
            self.assertTrue(torch.equal(plain["recv_idx"][i], li))
            self.assertTrue(torch.equal(plain["recv_w"][i].masked_fill(~hit, 0), w.masked_fill(~hit, 0)))
        rows = plain["recv_x"].size(0)
        self.assertEqual(rows, n if sync else ranks * 12)
        # Scale-up prefix sums, per-expert counts and prefix sums.
        up = ranks if not (hybrid and ranks > per_node) else per_node
        per_src = [sum(1 for g, *_ in ref if g // 12 == s) for s in range(ranks)]
        want = [sum(per_src[i::up]) for i in range(up)]
        self.assertEqual(h.psum_num_recv_tokens_per_scaleup_rank.tolist(),
                         torch.cumsum(torch.tensor(want), 0).tolist())
        counts = [sum(int((li == e).sum()) for _, _, li, _, _ in ref) for e in range(epr)]
        aligned = [elastic.align(c, alignment) for c in counts]
        self.assertEqual(h.num_unaligned_recv_tokens_per_expert.tolist(), counts)
        self.assertEqual(plain["stats"].tolist(), [5 + c for c in counts])  # added to, as V2
        self.assertEqual(h.psum_num_recv_tokens_per_expert.tolist(), torch.cumsum(torch.tensor(aligned), 0).tolist())
        self.assertEqual(h.num_recv_tokens_per_expert_list, aligned if sync else [])
        eh = expanded["h"]
        starts = [sum(aligned[:e]) for e in range(epr)]
        self.assertEqual(eh.psum_num_recv_tokens_per_expert.tolist(), [s + c for s, c in zip(starts, counts)])
        # Expanded rows: each local slot's row holds the token; the padding is zero.
        ex, ew = expanded["recv_x"], expanded["recv_w"]
        self.assertIsNone(expanded["recv_idx"])
        self.assertEqual(ex.size(0), sum(aligned) if sync else
                         elastic.worst_case_rows(ranks, 12, topk, epr, alignment)[1])
        slots = eh.recv_src_metadata[:n, 2:]
        used = set()
        for i, (g, x, li, w, hit) in enumerate(ref):
            for k in range(topk):
                s = int(slots[i, k])
                if not hit[k]:
                    self.assertEqual(s, -1)
                    continue
                e = int(li[k])
                self.assertTrue(starts[e] <= s < starts[e] + counts[e], "slot outside its expert's rows")
                self.assertTrue(torch.equal(ex[s], x))
                self.assertEqual(float(ew[s]), float(w[k]))
                used.add(s)
        self.assertEqual(len(used), sum(counts))
        for e in range(epr):
            pad = slice(starts[e] + counts[e], starts[e] + aligned[e])
            self.assertTrue(bool((ex[pad] == 0).all()) and bool((ew[pad] == 0).all()))
        # Cached dispatches give the same rows (expanded: with the weights).
        cx, cidx, cw, ch, _ = plain["cached"]
        self.assertIs(ch, h)
        self.assertTrue(torch.equal(cx[:n], plain["recv_x"][:n]) and cidx is plain["recv_idx"] and cw is None)
        ecx, _, ecw, _, _ = expanded["cached"]
        for s in used:
            self.assertTrue(torch.equal(ecx[s], ex[s]) and float(ecw[s]) == float(ew[s]))

    def test_one_node(self):
        for ranks, topk, bias, sync, alignment in ((2, 4, 0, True, 1), (2, 4, 2, True, 4), (4, 4, 1, False, 4),
                                                   (4, 3, 0, True, 1), (3, 4, 2, False, 1)):
            with self.subTest(ranks=ranks, topk=topk, bias=bias, sync=sync, alignment=alignment):
                self.case(ranks, ranks, topk, 4 * ranks, alignment, bias, sync)

    def test_more_ranks_than_topk(self):
        self.case(6, 6, 2, 12, 1, 1, True)   # per-slot blocks
        self.case(6, 6, 2, 12, 2, 0, False)  # two contributions: the engine's own sum

    def test_nodes(self):
        self.case(4, 2, 4, 16, 1, 2, True)             # hybrid: a node's ranks first
        self.case(4, 2, 4, 16, 4, 0, False)
        self.case(4, 2, 4, 16, 1, 1, True, hybrid=False)  # direct mode over nodes
        self.case(6, 2, 4, 12, 1, 0, True)             # 3 nodes x 2

    def test_the_engine_order_differs(self):
        # What exact_combine_order=False gives: other bits (so the cases
        # above do tell V2's order from the engine's).
        with self.assertRaisesRegex(AssertionError, "differs from V2's order"):
            self.case(4, 4, 4, 16, 1, 0, True, exact=False)
        with self.assertRaisesRegex(AssertionError, "differs from V2's order"):
            self.case(4, 2, 4, 16, 1, 2, True, exact=False)

    def test_without_multiple_reduction(self):
        self.case(4, 4, 4, 16, 1, 1, True, multiple_reduction=False)
        self.case(4, 2, 4, 16, 2, 0, False, multiple_reduction=False)


class Replay:
    """A V1 stand-in that answers every call with the outputs its inner
    Buffer gave the first time (per kind of call): V2's calls then cost
    their own host work only (the host-cost measurement and the counts of
    tensor operations below)."""

    def __init__(self, inner):
        self.inner, self.recorded, self.replaying = inner, {}, False
        self.max_tokens = inner.max_tokens

    def _call(self, kind, call):
        if not self.replaying:
            self.recorded[kind] = call()
        return self.recorded[kind]

    def get_dispatch_layout(self, topk_idx, num_experts):
        return self._call("layout", lambda: self.inner.get_dispatch_layout(topk_idx, num_experts))

    def _layout_and_copy(self, topk_idx, num_experts):
        return self._call("layout_copy", lambda: self.inner._layout_and_copy(topk_idx, num_experts))

    def dispatch(self, x, handle=None, **kwargs):
        return self._call("cached" if handle is not None else "dispatch",
                          lambda: self.inner.dispatch(x, handle=handle, **kwargs))

    def combine(self, x, handle, **kwargs):
        return self._call("combine", lambda: self.inner.combine(x, handle, **kwargs))

    def _cached_recv_x(self, x, handle, config):
        return self._call("cached_x", lambda: self.inner._cached_recv_x(x, handle, config))

    def _dispatch_plain(self, *args):
        return self._call("dispatch", lambda: self.inner._dispatch_plain(*args))

    def _layout_dispatch(self, *args):
        return self._call("layout_dispatch", lambda: self.inner._layout_dispatch(*args))

    def _combine_plain(self, x, handle, topk_weights, bias, config):
        return self._call("combine_plain", lambda: self.inner._combine_plain(x, handle, topk_weights, bias, config))


def one_rank(tokens=8, topk=4, experts=8, max_tokens=12, replay=False, multiple_reduction=True):
    """An ElasticBuffer of one rank over the stand-in engine, and its inputs."""
    world = World(1, 1)
    b = make_buffer(world, 0, max_tokens, topk, multiple_reduction=multiple_reduction)
    if replay:
        b.runtime = Replay(b.runtime)
    g = torch.Generator().manual_seed(7)
    weights, idx = torch.topk(torch.rand((tokens, experts), generator=g), topk)
    x = torch.randn((tokens, HIDDEN), generator=g).to(torch.bfloat16)
    return b, x, idx.to(torch.int64), weights.float()


if HAVE_TORCH:
    from torch.utils._python_dispatch import TorchDispatchMode

    class TensorOps(TorchDispatchMode):
        """The tensor operations run inside the `with` block, by name."""

        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class PerCallWork(unittest.TestCase):
    """A V2 call's host work beyond the V1 calls it makes: no tensor
    operation but V2's own (the handle's copy of topk_idx), and the
    argument checks' shortcuts refuse exactly what the full checks refuse."""

    def ops(self, call):
        with TensorOps() as ops:
            call()
        return ops.names

    def test_plain_calls_run_no_tensor_operation_beyond_the_v1_calls(self):
        b, x, idx, w = one_rank(replay=True)
        for sync in (True, False):
            with self.subTest(do_cpu_sync=sync):
                b.runtime.replaying = False
                b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8, do_cpu_sync=sync, do_handle_copy=False)
                recv, _, _, h, _ = b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8, do_cpu_sync=sync)
                b.dispatch(x, handle=h)
                b.combine(recv, h)
                b.runtime.replaying = True
                # The handle's copy of topk_idx comes with V1's layout (its
                # kernel writes it): no operation of ElasticBuffer's own.
                self.assertEqual(self.ops(lambda: b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8,
                                                             do_cpu_sync=sync)), [])
                self.assertEqual(self.ops(lambda: b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8,
                                                             do_cpu_sync=sync, do_handle_copy=False)), [])
                self.assertEqual(self.ops(lambda: b.dispatch(x, handle=h)), [])
                self.assertEqual(self.ops(lambda: b.combine(recv, h)), [])

    def test_handle_fields_are_made_when_read_unless_captured(self):
        b, x, idx, w = one_rank()
        _, _, _, lazy, _ = b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8, do_cpu_sync=False)
        self.assertFalse(set(elastic._LAZY_FIELDS) & set(vars(lazy)))
        b._plan.capturing = lambda: True
        _, _, _, captured, _ = b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8, do_cpu_sync=False)
        self.assertTrue(set(elastic._LAZY_FIELDS) <= set(vars(captured)))
        for name in elastic._LAZY_FIELDS:
            self.assertTrue(torch.equal(getattr(lazy, name), getattr(captured, name)), name)

    def test_a_dispatched_handle_has_the_constructors_fields(self):
        b, x, idx, w = one_rank()
        for expand in (False, True):
            recv, _, _, h, _ = b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8, expert_alignment=4,
                                          do_expand=expand)
            made = deep_ep.EPHandle(expand, 8, 4, 12, h.num_sms, h.topk_idx, h.num_recv_tokens,
                                    sum(h.num_recv_tokens_per_expert_list), h.num_recv_tokens_per_expert_list)
            for name in ("do_expand", "num_experts", "expert_alignment", "num_max_tokens_per_rank", "num_sms",
                         "topk_idx", "num_recv_tokens", "num_expanded_tokens", "num_recv_tokens_per_expert_list",
                         "token_metadata_at_forward", "channel_linked_list", "cached_recv_src_metadata_before_sort",
                         "_rows", "_expanded_rows", "_num_tokens", "_num_topk"):
                mine, want = getattr(h, name), getattr(made, name)
                self.assertTrue(torch.equal(mine, want) if name == "topk_idx" else mine == want,
                                f"{name} (do_expand={expand})")
            self.assertEqual(h.num_expanded_tokens, recv.size(0) if expand else sum(h.num_recv_tokens_per_expert_list))

    def same_refusal(self, call, reference):
        """call() raises what reference() raises, with its message."""
        with self.assertRaises((AssertionError, NotImplementedError)) as want:
            reference()
        with self.assertRaises(type(want.exception)) as got:
            call()
        self.assertEqual(str(got.exception), str(want.exception))

    def test_dispatch_refusals_are_the_full_checks(self):
        b, x, idx, w = one_rank()
        b._device_sms = 24
        plan = b._make_plan()
        f16, i32 = torch.float16, torch.int32
        base = dict(x=x, topk_idx=idx, topk_weights=w, num_experts=8, num_max_tokens_per_rank=None,
                    expert_alignment=None, num_sms=0, num_qps=0, do_expand=False, do_zero_padding=False,
                    cumulative_local_expert_recv_stats=None)
        for name, over in (("weights dtype", dict(topk_weights=w.to(f16))),
                           ("weights shape", dict(topk_weights=w[:, :3].contiguous())),
                           ("weights strided", dict(topk_weights=w.t().contiguous().t())),
                           ("x strided", dict(x=x.t().contiguous().t())),
                           ("x float32", dict(x=x.float())), ("x 3-D", dict(x=x.view(8, 2, 64))),
                           ("x 1-D", dict(x=x[0])), ("hidden 192", dict(x=torch.zeros((8, 192), dtype=x.dtype))),
                           ("hidden over the buffer's", dict(x=torch.zeros((8, 256), dtype=x.dtype))),
                           ("topk_idx int32", dict(topk_idx=idx.to(i32))),
                           ("topk_idx rows", dict(topk_idx=idx[:4])),
                           ("top-k over the buffer's", dict(topk_idx=torch.cat([idx, idx], 1),
                                                            topk_weights=torch.cat([w, w], 1))),
                           ("tokens", dict(num_max_tokens_per_rank=4)),
                           ("more than the engine holds", dict(num_max_tokens_per_rank=13)),
                           ("experts", dict(num_experts=None)), ("experts 0", dict(num_experts=0)),
                           ("alignment", dict(expert_alignment=0)), ("SMs", dict(num_sms=-2)),
                           ("QPs", dict(num_qps=66)), ("zero padding", dict(do_zero_padding=True)),
                           ("stats", dict(cumulative_local_expert_recv_stats=torch.zeros(3, dtype=i32))),
                           ("no topk_idx", dict(topk_idx=None)), ("SMs over the GPU's", dict(num_sms=26)),
                           ("previous event", dict(previous_event=object()))):
            a = dict(base, **over)
            with self.subTest(name):
                nmax = 12 if a["num_max_tokens_per_rank"] is None else a["num_max_tokens_per_rank"]
                num_sms = a["num_sms"] or 20
                num_qps = a["num_qps"] or b.get_theoretical_num_qps(num_sms)
                self.same_refusal(
                    lambda: b.dispatch(**a),
                    lambda: b._check_dispatch(plan, a["x"], None, a["topk_idx"], a["topk_weights"],
                                              a["cumulative_local_expert_recv_stats"], a["num_experts"], nmax,
                                              elastic.value_or(a["expert_alignment"], 1), num_sms, num_qps,
                                              a["do_expand"], a["do_zero_padding"], a.get("previous_event")))

    def test_cached_dispatch_refusals_are_the_full_checks(self):
        b, x, idx, w = one_rank()
        _, _, _, h, _ = b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8)
        for name, over in (("x rows", dict(x=x[:4])), ("x float32", dict(x=x.float())),
                           ("x strided", dict(x=x.t().contiguous().t())),
                           ("weights dtype", dict(topk_weights=w.double())),
                           ("weights shape", dict(topk_weights=w[:, :2].contiguous())),
                           ("experts", dict(num_experts=16)), ("alignment", dict(expert_alignment=2)),
                           ("tokens", dict(num_max_tokens_per_rank=8)), ("layout", dict(do_expand=True)),
                           ("CPU sync", dict(do_cpu_sync=True)), ("topk_idx", dict(topk_idx=idx)),
                           ("zero padding", dict(do_zero_padding=True)), ("QPs", dict(num_qps=66)),
                           ("previous event", dict(previous_event=object())), ("handle", dict(handle=(1, 2)))):
            a = dict(dict(x=x, handle=h), **over)
            with self.subTest(name):
                self.same_refusal(lambda: b.dispatch(**a), lambda: b._check_cached(
                    b._plan, a["x"], a.get("topk_idx"), a.get("topk_weights"), None, a.get("num_experts"),
                    a.get("num_max_tokens_per_rank"), a.get("expert_alignment"), 20, a.get("num_qps", 0),
                    a["handle"], a.get("do_cpu_sync"), a.get("do_expand", False), a.get("do_zero_padding", False),
                    a.get("previous_event")))
        # A handle of another buffer: checked in full (and served).
        other, *_ = one_rank()
        _, _, _, foreign, _ = other.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8)
        self.assertIsNot(foreign._proof, b._plan)
        self.assertTrue(torch.equal(b.dispatch(x, handle=foreign)[0], x))

    def test_combine_refusals_are_the_full_checks(self):
        for expand in (False, True):
            for multiple_reduction in (True, False):
                b, x, idx, w = one_rank(multiple_reduction=multiple_reduction)
                recv, _, recv_w, h, _ = b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8, do_expand=expand)
                bias = torch.zeros((8, HIDDEN), dtype=torch.bfloat16)
                for name, over in (("x rows", dict(x=recv[:3])), ("x float32", dict(x=recv.float())),
                                   ("x strided", dict(x=recv.t().contiguous().t())),
                                   ("x rows of 8 bytes", dict(x=torch.zeros((recv.size(0), 4), dtype=recv.dtype))),
                                   ("weights dtype", dict(topk_weights=recv_w.double())),
                                   ("weights 2-D", dict(topk_weights=recv_w.view(-1, 1))),
                                   ("weights as given", dict(topk_weights=recv_w)),
                                   ("bias shape", dict(bias=bias[:4])), ("biases", dict(bias=(bias, bias[:, :64]))),
                                   ("weights strided", dict(topk_weights=torch.stack([recv_w, recv_w], -1)[..., 0])),
                                   ("more rows", dict(x=torch.cat([recv, recv[:2]]).contiguous())),
                                   ("QPs", dict(num_qps=66)), ("SMs", dict(num_sms=-2)),
                                   ("previous event", dict(previous_event=object())),
                                   ("handle", dict(handle=object()))):
                    a = dict(dict(x=recv, handle=h, topk_weights=None, bias=None, num_qps=0, num_sms=0), **over)
                    with self.subTest(name, expand=expand, multiple_reduction=multiple_reduction):
                        call = lambda: b.combine(**a)  # noqa: E731
                        full = lambda: elastic.check_combine(  # noqa: E731
                            a["x"], a["topk_weights"], elastic.unpack_bias(a["bias"]), a["handle"],
                            a["num_qps"] or b.get_theoretical_num_qps(20), b.num_allocated_qps,
                            multiple_reduction, a["num_sms"] or 20, a.get("previous_event"))
                        try:
                            full()
                        except (AssertionError, NotImplementedError):
                            self.same_refusal(call, full)
                        # (What the full checks take, e.g. the weights as
                        # given, is the semantics tests' to check.)

    def test_hybrid_mode_takes_at_most_160_sms(self):
        # V2's kNumMaxSMs, asserted where the scale-out leg is used.
        x, idx = torch.zeros((4, HIDDEN), dtype=torch.bfloat16), torch.zeros((4, 4), dtype=torch.int64)
        for hybrid, refused in ((True, True), (False, False)):
            b = make_buffer(World(4, 2), 0, 12, 4, hybrid=hybrid)
            b._device_sms = 200
            with self.subTest(hybrid=hybrid):
                b._make_plan()
                self.assertEqual(b._plan.max_num_sms, 160 if hybrid else 200)
                if refused:
                    with self.assertRaisesRegex(AssertionError, "num_sms 162 is more than 160"):
                        b.dispatch(x, topk_idx=idx, num_experts=8, num_sms=162)

    def test_expand_combine_reads_only_the_rows_the_handle_names(self):
        # V2 takes an x with more rows than the expanded ones (e.g. a GEMM's padded output).
        b, x, idx, w = one_rank()
        recv, _, recv_w, h, _ = b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8, do_expand=True,
                                           expert_alignment=4)
        want = b.combine(recv, h, topk_weights=recv_w)
        more = torch.cat([recv, torch.full((5, HIDDEN), float("nan"), dtype=recv.dtype)])
        more_w = torch.cat([recv_w, torch.full((5,), float("nan"))])
        got = b.combine(more, h, topk_weights=more_w)
        self.assertTrue(torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]))

    def test_the_no_event_event_is_a_default_one(self):
        b, x, idx, w = one_rank()
        event = b.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=8)[4]
        self.assertIsInstance(event, deep_ep.ElasticEventOverlap)
        self.assertEqual((event.event, event.extra_tensors, event.hook_after_wait), (None, None, None))
        calls = []
        event.register_hook_after_wait(lambda: calls.append(1))
        with event(release_handle=True):
            pass
        self.assertEqual(calls, [])  # no event: nothing waited for, as V2
        self.assertIsNone(deep_ep.ElasticEventOverlap().hook_after_wait)


if __name__ == "__main__":
    unittest.main()
