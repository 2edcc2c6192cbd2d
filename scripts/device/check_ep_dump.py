"""Checks an `epkit bench ep --dump DIR` folder with numpy alone: re-derives
every rank's dispatch outputs (recv_x and its routing, FP8 rows and scales,
the rank prefix matrix, layout counts) and combine outputs from the dumped
inputs of all ranks, and compares them with what the engine wrote.

    python3 scripts/device/check_ep_dump.py DIR

The expected data follows DeepEP's intranode semantics: experts split evenly
over ranks; a token goes to a rank once if any of its top-k experts lives
there; each rank's received rows are grouped by source rank (rank 0 first),
each group in token order. Combine sums a token's rows from every rank it
went to in FP32, in rank order, and rounds once to BF16 (round to nearest
even). BF16 is stored as '<u2' and FP8 as '|u1' (README.txt in DIR).

A dump made across nodes (README.txt says "Across nodes (N nodes x G)") has
no recv_src_idx and holds recv_gbl_rank_prefix_sum (the rank's column of the
prefix matrix); its combine sums each node's rows in rank order, rounds to
BF16, then sums the nodes in node order and rounds again (weights: FP32 sums
per node, then over nodes), as the internode engine does.

Exit status: 0 when everything matches, 1 on a mismatch, 2 on a bad folder.
"""
import os
import re
import sys

import numpy as np


REQUIRED = ("x", "x_fp8", "x_scales", "topk_idx", "topk_weights", "num_tokens_per_rank",
            "num_tokens_per_expert", "is_token_in_rank", "recv_x", "recv_topk_idx",
            "recv_topk_weights", "recv_x_fp8", "recv_x_scales", "num_recv_tokens_per_expert",
            "combined_x", "combined_topk_weights")
INTRANODE = ("recv_src_idx", "rank_prefix_matrix")
INTERNODE = ("recv_gbl_rank_prefix_sum",)


def nodes_of(top, world):
    """Ranks per node from README.txt's "Across nodes (N nodes x G)"; world
    (one node) when the line is absent."""
    try:
        with open(os.path.join(top, "README.txt")) as f:
            m = re.search(r"Across nodes \((\d+) nodes x (\d+)\)", f.read())
    except OSError:
        m = None
    return int(m.group(2)) if m else world


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """Round to nearest even, as CUDA's __float2bfloat16_rn; NaN stays NaN."""
    u = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def load_rank(folder):
    names = [n[:-4] for n in os.listdir(folder) if n.endswith(".npy")]
    return {n: np.load(os.path.join(folder, n + ".npy")) for n in names}


class Checker:
    def __init__(self):
        self.failures = 0

    def same(self, rank, name, got, want, note=""):
        """Bitwise comparison; prints where the first difference is."""
        if got.shape != want.shape or got.dtype.itemsize != want.dtype.itemsize:
            print(f"rank {rank}: {name}: {got.dtype}{list(got.shape)}, expected "
                  f"{want.dtype}{list(want.shape)}")
            self.failures += 1
            return
        # Compare bits, not values: NaN, -0.0 and BF16 stored as integers alike.
        bits = np.dtype(f"u{got.dtype.itemsize}")
        a = np.ascontiguousarray(got).view(bits).reshape(got.shape[0], -1)
        b = np.ascontiguousarray(want).view(bits).reshape(got.shape[0], -1)
        rows = np.nonzero((a != b).any(axis=1))[0] if got.size else []
        if len(rows) == 0:
            print(f"rank {rank}: {name} OK {list(got.shape)}{note}")
            return
        first = rows[0]
        col = int(np.nonzero(a[first] != b[first])[0][0])
        print(f"rank {rank}: {name}: {len(rows)} of {a.shape[0]} rows differ; first at row "
              f"{first}, column {col}: got 0x{int(a[first, col]):x}, expected "
              f"0x{int(b[first, col]):x}")
        self.failures += 1


def main():
    if len(sys.argv) != 2:
        print("usage: check_ep_dump.py DIR (the folder of epkit bench ep --dump)", file=sys.stderr)
        return 2
    top = sys.argv[1]
    ranks = sorted(int(d[4:]) for d in os.listdir(top)
                   if d.startswith("rank") and d[4:].isdigit())
    if not ranks or ranks != list(range(len(ranks))):
        print(f"{top}: expected folders rank0..rankN-1, found {ranks}", file=sys.stderr)
        return 2
    world = len(ranks)
    per_node = nodes_of(top, world)
    internode = per_node < world
    if world % per_node != 0:
        print(f"{top}: {world} ranks do not split into nodes of {per_node}", file=sys.stderr)
        return 2
    data = [load_rank(os.path.join(top, f"rank{r}")) for r in ranks]
    for r, files in enumerate(data):
        missing = sorted(set(REQUIRED + (INTERNODE if internode else INTRANODE)) - set(files))
        if missing:
            print(f"{top}/rank{r}: missing {', '.join(n + '.npy' for n in missing)}",
                  file=sys.stderr)
            return 2
    experts = data[0]["num_tokens_per_expert"].shape[0]
    if experts % world != 0:
        print(f"{experts} experts do not split over {world} ranks", file=sys.stderr)
        return 2
    per_rank = experts // world
    hidden = data[0]["x"].shape[1]
    print(f"{top}: {world} ranks"
          f"{f' ({world // per_node} nodes x {per_node})' if internode else ''}, "
          f"{data[0]['x'].shape[0]} tokens, hidden {hidden}, "
          f"top-{data[0]['topk_idx'].shape[1]}, {experts} experts")
    check = Checker()

    # in_rank[s][:, d]: token of rank s goes to rank d.
    in_rank = []
    for s in range(world):
        idx = data[s]["topk_idx"]
        owner = np.where(idx >= 0, idx // per_rank, -1)
        in_rank.append(np.stack([(owner == d).any(axis=1) for d in range(world)], axis=1))

    # Layout, on each source rank.
    for s in range(world):
        idx = data[s]["topk_idx"]
        valid = idx[idx >= 0]
        check.same(s, "num_tokens_per_rank", data[s]["num_tokens_per_rank"],
                   in_rank[s].sum(axis=0).astype(np.int32))
        check.same(s, "num_tokens_per_expert", data[s]["num_tokens_per_expert"],
                   np.bincount(valid, minlength=experts).astype(np.int32))
        check.same(s, "is_token_in_rank", data[s]["is_token_in_rank"], in_rank[s])

    # Dispatch, on each destination rank; remember where each token landed.
    sent_to = np.zeros((world, world), dtype=np.int64)  # (s, d): rows s sent to d
    for d in range(world):
        lo, hi = d * per_rank, (d + 1) * per_rank
        parts = {k: [] for k in ("x", "x_fp8", "scales", "idx", "w", "src")}
        counts = []
        for s in range(world):
            tokens = np.nonzero(in_rank[s][:, d])[0]
            counts.append(tokens.size)
            idx = data[s]["topk_idx"][tokens]
            local = (idx >= lo) & (idx < hi)
            parts["x"].append(data[s]["x"][tokens])
            parts["x_fp8"].append(data[s]["x_fp8"][tokens])
            parts["scales"].append(data[s]["x_scales"][tokens])
            parts["idx"].append(np.where(local, idx - lo, -1).astype(idx.dtype))
            parts["w"].append(np.where(local, data[s]["topk_weights"][tokens], 0).astype(np.float32))
            parts["src"].append(tokens.astype(np.int32))
        got = data[d]
        remote = sum(counts) - counts[d]
        check.same(d, "recv_x", got["recv_x"], np.concatenate(parts["x"]),
                   f", {remote} rows from other ranks")
        check.same(d, "recv_topk_idx", got["recv_topk_idx"], np.concatenate(parts["idx"]))
        check.same(d, "recv_topk_weights", got["recv_topk_weights"], np.concatenate(parts["w"]))
        if not internode:  # an internode dispatch has no recv_src_idx, as DeepEP's
            check.same(d, "recv_src_idx", got["recv_src_idx"], np.concatenate(parts["src"]))
        check.same(d, "recv_x_fp8", got["recv_x_fp8"], np.concatenate(parts["x_fp8"]))
        check.same(d, "recv_x_scales", got["recv_x_scales"], np.concatenate(parts["scales"]))
        recv_idx = np.concatenate(parts["idx"])
        check.same(d, "num_recv_tokens_per_expert", got["num_recv_tokens_per_expert"],
                   np.bincount(recv_idx[recv_idx >= 0], minlength=per_rank).astype(np.int32))
        sent_to[:, d] = counts

    # (i, j): rows rank j received from ranks 0..i; every rank holds all of it.
    prefix = np.cumsum(sent_to, axis=0).astype(np.int32)
    for r in range(world):
        if internode:  # the rank's column only
            check.same(r, "recv_gbl_rank_prefix_sum", data[r]["recv_gbl_rank_prefix_sum"],
                       np.ascontiguousarray(prefix[:, r]))
        else:
            check.same(r, "rank_prefix_matrix", data[r]["rank_prefix_matrix"], prefix)

    # Combine, on each source rank: what each rank it went to got back from
    # it (its own row, and its weights where the expert is that rank's),
    # summed in FP32 in rank order and rounded once; across nodes summed so
    # per node, rounded, then summed over the nodes the token reached.
    for s in range(world):
        idx = data[s]["topk_idx"]
        x = bf16_to_f32(data[s]["x"])
        acc = np.zeros(x.shape, dtype=np.float32)
        acc_w = np.zeros(idx.shape, dtype=np.float32)
        for first in range(0, world, per_node):
            node_x = np.zeros(x.shape, dtype=np.float32)
            node_w = np.zeros(idx.shape, dtype=np.float32)
            reached = np.zeros(x.shape[0], dtype=bool)
            for d in range(first, first + per_node):
                sent = in_rank[s][:, d]
                local = (idx >= d * per_rank) & (idx < (d + 1) * per_rank)
                node_x[sent] += x[sent]
                node_w[sent] += np.where(local, data[s]["topk_weights"], 0).astype(np.float32)[sent]
                reached |= sent
            if internode:
                node_x = bf16_to_f32(f32_to_bf16(node_x))
            acc[reached] += node_x[reached]
            acc_w[reached] += node_w[reached]
        check.same(s, "combined_x", data[s]["combined_x"], f32_to_bf16(acc))
        check.same(s, "combined_topk_weights", data[s]["combined_topk_weights"], acc_w)

    print("OK: every output matches" if check.failures == 0 else
          f"MISMATCH: {check.failures} comparisons failed")
    return 0 if check.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
