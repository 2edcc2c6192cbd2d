"""epkit.deep_ep.ElasticBuffer (DeepEP V2's API, dd758ca) on a machine
without PyTorch or a GPU: it refuses what V2 asserts, names what the engine
does not do, and its pure parts (sizes, the summation plan, events, the
handle) behave as V2's."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import epkit.deep_ep as deep_ep  # noqa: E402
from epkit.deep_ep import elastic  # noqa: E402
from fake_tensor import FakeTensor as T  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

RANKS, TOKENS, MAX_TOKENS, HIDDEN, TOPK, EXPERTS = 4, 16, 32, 256, 6, 32
MB2 = 2 << 20


class FakeGroup:
    def __init__(self, size, rank=0):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def dispatch_args(**over):
    args = dict(x=T((TOKENS, HIDDEN), "bfloat16"), sf=None, topk_idx=T((TOKENS, TOPK), "int64"),
                topk_weights=T((TOKENS, TOPK), "float32"), cumulative_local_expert_recv_stats=None,
                num_experts=EXPERTS, num_ranks=RANKS, num_max_tokens_per_rank=MAX_TOKENS, expert_alignment=1,
                num_sms=20, num_qps=9, num_allocated_qps=17, do_expand=False, do_zero_padding=False)
    args.update(over)
    return args


def handle(**over):
    h = deep_ep.EPHandle(do_expand=False, num_experts=EXPERTS, expert_alignment=1, num_max_tokens_per_rank=MAX_TOKENS,
                         num_sms=20, topk_idx=T((TOKENS, TOPK), "int64"), num_recv_tokens=40,
                         num_expanded_tokens=96, num_recv_tokens_per_expert_list=[])
    h._v1 = object()
    for k, v in over.items():
        setattr(h, k, v)
    return h


class Constructor(unittest.TestCase):
    @unittest.skipIf(HAVE_TORCH, "PyTorch is installed here")
    def test_needs_pytorch(self):
        with self.assertRaisesRegex(ImportError, "ElasticBuffer needs PyTorch"):
            deep_ep.ElasticBuffer(FakeGroup(RANKS), num_max_tokens_per_rank=MAX_TOKENS, hidden=HIDDEN)

    def test_v2_asserts_and_missing_features(self):
        g = FakeGroup(RANKS)
        with self.assertRaises(AssertionError):  # V2: num_cpu_bytes needs num_bytes
            deep_ep.ElasticBuffer(g, num_cpu_bytes=MB2)
        with self.assertRaisesRegex(NotImplementedError, "Engram"):
            deep_ep.ElasticBuffer(g, num_bytes=4 * MB2, num_cpu_bytes=MB2)
        with self.assertRaisesRegex(AssertionError, "num_max_tokens_per_rank > 0 and hidden > 0"):
            deep_ep.ElasticBuffer(g)
        with self.assertRaisesRegex(AssertionError, "2 MiB"):
            deep_ep.ElasticBuffer(g, num_bytes=MB2 + 1)
        with self.assertRaisesRegex(NotImplementedError, "hidden 200"):
            deep_ep.ElasticBuffer(g, num_max_tokens_per_rank=MAX_TOKENS, hidden=200)
        with self.assertRaisesRegex(AssertionError, "num_cpu_bytes must be >= 0"):  # V2: num_cpu_bytes >= 0
            deep_ep.ElasticBuffer(g, num_bytes=4 * MB2, num_cpu_bytes=-MB2)
        with self.assertRaisesRegex(AssertionError, "2 MiB"):  # V2: num_bytes > 0
            deep_ep.ElasticBuffer(g, num_bytes=0)

    def test_size_hint_asserts(self):
        # V2's calculate_elastic_buffer_size: tokens and hidden positive.
        for tokens, hidden in ((0, HIDDEN), (MAX_TOKENS, 0)):
            with self.subTest(tokens=tokens, hidden=hidden), self.assertRaisesRegex(AssertionError, "positive"):
                deep_ep.ElasticBuffer.get_buffer_size_hint(FakeGroup(RANKS), tokens, hidden)


class DispatchChecks(unittest.TestCase):
    def refused(self, pattern, error=AssertionError, **over):
        with self.assertRaisesRegex(error, pattern):
            elastic.check_dispatch(**dispatch_args(**over))

    def test_valid_dispatches_pass(self):
        elastic.check_dispatch(**dispatch_args())
        elastic.check_dispatch(**dispatch_args(topk_weights=None, do_expand=True, do_zero_padding=True,
                                               expert_alignment=128))
        elastic.check_dispatch(**dispatch_args(x=T((TOKENS, HIDDEN), "float8_e4m3fn"),
                                               sf=T((TOKENS, HIDDEN // 128), "float32", contiguous=False)))
        elastic.check_dispatch(**dispatch_args(cumulative_local_expert_recv_stats=T((EXPERTS // RANKS,), "int32")))

    def test_v2_refusals(self):
        self.refused("Allocated QPs are not enough", num_qps=18)
        self.refused("num_sms must be positive", num_sms=0)
        self.refused("do_zero_padding needs do_expand", do_zero_padding=True)
        self.refused("needs num_experts", num_experts=None)
        self.refused("do not split over 4 ranks", num_experts=30)
        self.refused("expert_alignment", expert_alignment=0)
        self.refused("contiguous 2-D", x=T((TOKENS, HIDDEN), "bfloat16", contiguous=False))
        self.refused("more than num_max_tokens_per_rank", num_max_tokens_per_rank=8)
        self.refused("or FP8 with scale factors", x=T((TOKENS, HIDDEN), "float8_e4m3fn"))
        self.refused("go with FP8", sf=T((TOKENS, 2), "float32"))
        self.refused("one row per token", x=T((TOKENS, HIDDEN), "float8_e4m3fn"), sf=T((8, 2), "float32"))
        self.refused("topk_idx_t", topk_idx=T((TOKENS, TOPK), "int32"))
        self.refused("one row per token of x", topk_idx=T((8, TOPK), "int64"))
        self.refused("topk_idx's shape", topk_weights=T((TOKENS, TOPK - 1), "float32"))
        self.refused("torch.float32", topk_weights=T((TOKENS, TOPK), "bfloat16"))
        self.refused("8 entries", cumulative_local_expert_recv_stats=T((7,), "int32"))
        self.refused("torch.int32 vector", cumulative_local_expert_recv_stats=T((8,), "int64"))
        self.refused("torch.int32 vector", cumulative_local_expert_recv_stats=T((8,), "int32", contiguous=False))
        self.refused("contiguous 2-D", topk_idx=T((TOKENS, TOPK), "int64", contiguous=False))
        self.refused("contiguous 2-D", topk_weights=T((TOKENS, TOPK), "float32", contiguous=False))
        self.refused("4-byte packs", x=T((TOKENS, HIDDEN), "float8_e4m3fn"), sf=T((TOKENS, 2), "bfloat16"))
        self.refused("num_topk 64 must be 1 to 63", topk_idx=T((TOKENS, 64), "int64"), topk_weights=None)
        # stream_control_prologue: a previous_event needs outputs on the communication stream.
        self.refused("previous_event needs allocate_on_comm_stream", previous_event=object())
        elastic.check_dispatch(**dispatch_args(previous_event=object(), allocate_on_comm_stream=True))
        # num_sms <= the GPU's SMs (and kNumMaxSMs = 160 in hybrid mode).
        self.refused("more than 132", num_sms=134, max_num_sms=132)
        elastic.check_dispatch(**dispatch_args(num_sms=132, max_num_sms=132))

    def test_what_the_engine_does_not_do_is_named(self):
        self.refused("packed UE8M0", NotImplementedError, x=T((TOKENS, HIDDEN), "float8_e4m3fn"),
                     sf=T((TOKENS, 2), "int32"))
        self.refused("hidden 192", NotImplementedError, x=T((TOKENS, 192), "bfloat16"))
        self.refused("one per 128 channels", NotImplementedError, x=T((TOKENS, HIDDEN), "float8_e4m3fn"),
                     sf=T((TOKENS, 1), "float32"))

    def test_cached_dispatch(self):
        h = handle()
        self.assertEqual(elastic.check_cached(h, None, None, None, None, None, False), (EXPERTS, 1, MAX_TOKENS))
        with self.assertRaises(AssertionError):
            elastic.check_cached(h, T((TOKENS, TOPK), "int64"), None, None, None, None, False)
        with self.assertRaisesRegex(AssertionError, "Cannot do CPU sync with cached handle"):
            elastic.check_cached(h, None, True, None, None, None, False)
        with self.assertRaises(AssertionError):
            elastic.check_cached(h, None, False, EXPERTS * 2, None, None, False)
        with self.assertRaisesRegex(AssertionError, "do_expand must be False"):
            elastic.check_cached(h, None, None, None, None, None, True)


class CombineChecks(unittest.TestCase):
    def test_v2_refusals(self):
        h = handle()
        x = T((40, HIDDEN), "bfloat16")
        elastic.check_combine(x, T((40, TOPK), "float32"), (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "Allocated QPs are not enough"):
            elastic.check_combine(x, None, (None, None), h, 18, 17, True)
        with self.assertRaisesRegex(AssertionError, "ElasticBuffer.dispatch"):
            elastic.check_combine(x, None, (None, None), object(), 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "40 received rows"):
            elastic.check_combine(T((39, HIDDEN), "bfloat16"), None, (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "bfloat16"):
            elastic.check_combine(T((40, HIDDEN), "float32"), None, (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, r"\[40, 6\]"):
            elastic.check_combine(x, T((40, TOPK - 1), "float32"), (None, None), h, 9, 17, True)
        bias = T((TOKENS, HIDDEN), "bfloat16")
        elastic.check_combine(x, None, (bias, bias), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, r"bias\[1\] must be \[16, 256\]"):
            elastic.check_combine(x, None, (bias, T((TOKENS + 1, HIDDEN), "bfloat16")), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, r"bias\[0\] must be a contiguous torch.bfloat16"):
            elastic.check_combine(x, None, (T((TOKENS, HIDDEN), "float32"), None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, r"bias\[0\] must be a contiguous torch.bfloat16"):
            elastic.check_combine(x, None, (T((TOKENS, HIDDEN), "bfloat16", contiguous=False), None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "contiguous 2-D"):
            elastic.check_combine(T((40, HIDDEN), "bfloat16", contiguous=False), None, (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "16 bytes"):
            elastic.check_combine(T((40, 4), "bfloat16"), None, (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "topk_weights must be contiguous"):
            elastic.check_combine(x, T((40, TOPK), "float32", contiguous=False), (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "num_sms must be positive"):  # V2: num_sms > 0
            elastic.check_combine(x, None, (None, None), h, 9, 17, True, num_sms=0)
        with self.assertRaisesRegex(AssertionError, "previous_event needs allocate_on_comm_stream"):
            elastic.check_combine(x, None, (None, None), h, 9, 17, True, previous_event=object())
        elastic.check_combine(x, None, (None, None), h, 9, 17, True, previous_event=object(),
                              allocate_on_comm_stream=True)

    def test_expand_mode(self):
        h = handle(do_expand=True)
        x = T((96, HIDDEN), "bfloat16")
        elastic.check_combine(x, T((96,), "float32"), (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "96 expanded rows"):
            elastic.check_combine(T((40, HIDDEN), "bfloat16"), None, (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, r"must be \[96\]"):
            elastic.check_combine(x, T((96, TOPK), "float32"), (None, None), h, 9, 17, True)
        # V2 reads the rows the handle names: x may have more; the weights have x's rows.
        elastic.check_combine(T((128, HIDDEN), "bfloat16"), T((128,), "float32"), (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, r"must be \[128\]"):
            elastic.check_combine(T((128, HIDDEN), "bfloat16"), T((96,), "float32"), (None, None), h, 9, 17, True)
        with self.assertRaisesRegex(AssertionError, "allow_multiple_reduction"):
            elastic.check_combine(x, T((96,), "float32"), (None, None), h, 9, 17, False)

    def test_bias_unpacking(self):
        self.assertEqual(deep_ep.ElasticBuffer._unpack_bias(None), (None, None))
        self.assertEqual(deep_ep.ElasticBuffer._unpack_bias("b"), ("b", None))
        self.assertEqual(deep_ep.ElasticBuffer._unpack_bias(("a", "b")), ("a", "b"))
        with self.assertRaises(AssertionError):
            deep_ep.ElasticBuffer._unpack_bias(("a", "b", "c"))


class TorchSettings(unittest.TestCase):
    """V2's check_torch_deterministic, before every dispatch and combine."""

    class Torch:
        def __init__(self, deterministic, fill):
            self._deterministic = deterministic
            self.utils = type("utils", (), {})()
            if fill is not None:
                self.utils.deterministic = type("deterministic", (), {"fill_uninitialized_memory": fill})()

        def are_deterministic_algorithms_enabled(self):
            return self._deterministic

    def test_deterministic_algorithms_with_filled_memory_are_refused(self):
        with self.assertRaisesRegex(AssertionError, "fill_uninitialized_memory are both on"):
            elastic.check_torch_deterministic(self.Torch(True, True))
        for deterministic, fill in ((True, False), (False, True), (True, None)):  # None: PyTorch without the setting
            elastic.check_torch_deterministic(self.Torch(deterministic, fill))


class Sizes(unittest.TestCase):
    def test_worst_case_rows_are_v2s(self):
        # V2: ranks x tokens; expanded: x min(top-k, local experts), plus the
        # alignment slack of every local expert, aligned.
        self.assertEqual(elastic.worst_case_rows(4, 4096, 6, 64, 1), (16384, 16384 * 6))
        self.assertEqual(elastic.worst_case_rows(4, 4096, 6, 64, 128),
                         (16384, elastic.align(16384 * 6 + 127 * 64, 128)))
        self.assertEqual(elastic.worst_case_rows(8, 100, 8, 2, 128), (800, elastic.align(1600 + 254, 128)))

    def test_combine_width(self):
        self.assertEqual(elastic.combine_width(4, 8, True, True), 4)      # a block per rank
        self.assertEqual(elastic.combine_width(16, 8, True, True), 8)     # a block per top-k slot
        self.assertEqual(elastic.combine_width(4, 8, False, True), 8)     # every slot on its own
        self.assertEqual(elastic.combine_width(4, 8, True, False), 1)     # the engine's order

    def test_runtime_buffer_has_an_arena_at_v2s_hidden(self):
        # Sized in tokens: rows as wide as the exact-order combine's, but the
        # arena for one dispatch at V2's hidden (without it, outputs were
        # copied out and combines staged: the host-cost profile's gap).
        args = elastic.runtime_buffer_args(4, None, 4096, 7168, 4, 8, 100, 4)
        self.assertEqual((args["max_tokens"], args["max_hidden"], args["max_topk"]), (4096, 4 * 7168, 8))
        self.assertEqual(args["num_nvl_bytes"], 0)
        self.assertEqual(args["output_pool_bytes"], deep_ep.buffer.output_pool_bytes(4 * 4096, 7168, 8))
        self.assertLess(args["output_pool_bytes"], deep_ep.buffer.output_pool_bytes(4 * 4096, 4 * 7168, 8))
        # Sized in bytes: the Buffer's own default.
        args = elastic.runtime_buffer_args(4, 64 * MB2, 0, 7168, 4, 8, 100, 4)
        self.assertEqual((args["num_nvl_bytes"], args["max_tokens"], args["output_pool_bytes"]), (64 * MB2, None, None))

    def test_output_pool_bytes(self):
        # 16384 rows of 7168 BF16 + 56 FP8 scales + 8 x (idx, weight, ...) + source: 2 MiB aligned.
        row = 7168 * 2 + 56 * 4 + 8 * 12 + 4
        got = deep_ep.buffer.output_pool_bytes(16384, 7168, 8)
        self.assertEqual(got % MB2, 0)
        self.assertTrue(16384 * row + 100 * (1 << 20) <= got < 16384 * row + 100 * (1 << 20) + MB2)

    def test_output_arena_wanted(self):
        wants = deep_ep.buffer.wants_output_arena
        self.assertTrue(wants(True, 1, 1 << 30, None))     # V1, sized in bytes
        self.assertTrue(wants(True, 1, 0, 4096))           # sized in tokens (ElasticBuffer)
        self.assertFalse(wants(True, 1, 0, None))          # no normal-mode memory
        self.assertFalse(wants(True, 2, 1 << 30, 4096))    # across nodes: outputs copied
        self.assertFalse(wants(False, 1, 1 << 30, 4096))   # the ctypes path

    def test_ranks_per_node(self):
        saved = os.environ.get("EPKIT_RANKS_PER_NODE")
        try:
            os.environ["EPKIT_RANKS_PER_NODE"] = "2"
            self.assertEqual(elastic.find_ranks_per_node(FakeGroup(4)), 2)
            self.assertEqual(elastic.find_ranks_per_node(FakeGroup(4), 4), 4)
            for bad in ("two", "-1", "0", "2; rm -rf /"):
                os.environ["EPKIT_RANKS_PER_NODE"] = bad
                with self.subTest(value=bad), self.assertRaisesRegex(AssertionError, "EPKIT_RANKS_PER_NODE"):
                    elastic.find_ranks_per_node(FakeGroup(4))
            os.environ["EPKIT_RANKS_PER_NODE"] = "3"
            with self.assertRaisesRegex(AssertionError, "whole nodes"):
                elastic.find_ranks_per_node(FakeGroup(4))
            os.environ["EPKIT_RANKS_PER_NODE"] = "16"
            with self.assertRaisesRegex(NotImplementedError, "16 ranks per node"):
                elastic.find_ranks_per_node(FakeGroup(32))
        finally:
            if saved is None:
                os.environ.pop("EPKIT_RANKS_PER_NODE", None)
            else:
                os.environ["EPKIT_RANKS_PER_NODE"] = saved


def buffer_shape(ranks, per_node, hybrid=True, multiple_reduction=True, topk=8):
    """An ElasticBuffer with no engine: the sizes the plan reads."""
    b = deep_ep.ElasticBuffer.__new__(deep_ep.ElasticBuffer)
    b.num_ranks, b.num_nvlink_ranks, b.num_rdma_ranks = ranks, per_node, ranks // per_node
    b.allow_hybrid_mode, b.allow_multiple_reduction = hybrid, multiple_reduction
    b.num_scaleout_ranks = b.num_rdma_ranks if hybrid and b.num_rdma_ranks > 1 else 1
    b.num_allocated_qps = 65 if hybrid else 17
    b._width = elastic.combine_width(ranks, topk, multiple_reduction, True)
    b.exact_combine_order = True
    return b


class SummationPlan(unittest.TestCase):
    def test_recipes_are_v2s_references(self):
        # V2's test: hybrid across nodes reduces in the rank, then the node;
        # expand mode without multiple reduction sends every slot.
        self.assertEqual(buffer_shape(4, 4)._recipe(False), (True, False))
        self.assertEqual(buffer_shape(4, 2)._recipe(False), (True, True))
        self.assertEqual(buffer_shape(4, 2, hybrid=False)._recipe(False), (True, False))
        self.assertEqual(buffer_shape(4, 4, multiple_reduction=False)._recipe(True), (False, False))
        self.assertEqual(buffer_shape(4, 4, multiple_reduction=False)._recipe(False), (True, False))

    def test_engine_order_only_where_it_gives_the_same_bits(self):
        def exact(b, topk, bias, expand=False):
            return b._engine_order_is_exact(b._recipe(expand), topk, bias)
        self.assertTrue(exact(buffer_shape(2, 2), 6, False))       # two floats add either way
        self.assertTrue(exact(buffer_shape(8, 8), 2, False))       # top-2: two destinations at most
        self.assertFalse(exact(buffer_shape(4, 4), 6, False))      # three ranks: order matters
        self.assertFalse(exact(buffer_shape(2, 2), 6, True))       # a bias first, then two
        self.assertFalse(exact(buffer_shape(1, 1), 6, True))       # biases: added by the token's rank
        self.assertTrue(exact(buffer_shape(4, 2), 6, False))       # 2 nodes x 2: two per level
        self.assertFalse(exact(buffer_shape(8, 4), 6, False))      # four ranks in a node
        self.assertFalse(exact(buffer_shape(4, 2, hybrid=False), 6, False))  # direct mode over nodes
        self.assertFalse(exact(buffer_shape(1, 1, multiple_reduction=False), 6, False, expand=True))

    def test_theoretical_sms_as_v2(self):
        with self.assertRaises(AssertionError):  # V2: num_scaleout_topk == 0
            buffer_shape(4, 4).get_theoretical_num_sms(EXPERTS, TOPK, num_scaleout_topk=2)

    def test_qps_as_v2(self):
        self.assertEqual(buffer_shape(4, 4).get_theoretical_num_qps(20), 65)
        self.assertEqual(buffer_shape(4, 4, hybrid=False).get_theoretical_num_qps(20), 9)
        self.assertEqual(buffer_shape(4, 4, hybrid=False).get_theoretical_num_qps(4), 4)


class EventsAndHandle(unittest.TestCase):
    class Event:
        def __init__(self):
            self.waits = 0

        def current_stream_wait(self):
            self.waits += 1

    def test_event_overlap_hook_and_release(self):
        calls = []
        e = deep_ep.ElasticEventOverlap(self.Event())
        self.assertIsInstance(e, deep_ep.EventOverlap)
        e.register_hook_after_wait(lambda: calls.append(1))
        with self.assertRaisesRegex(AssertionError, "already registered"):
            e.register_hook_after_wait(lambda: None)
        e.current_stream_wait()
        e.current_stream_wait()
        self.assertEqual((calls, e.event.waits), ([1], 2))
        with e(release_handle=True):
            pass
        self.assertIsNone(e.event)
        with deep_ep.ElasticEventOverlap():  # no event: nothing to wait for
            pass
        with self.assertRaises(AssertionError):
            deep_ep.ElasticEventOverlap().current_stream_wait()

    def test_handle_fields_are_derived_once_and_assignable(self):
        h = handle()
        self.assertIsNone(h.recv_src_metadata)  # nothing to derive from
        asked = []
        h = handle()
        h._derive = lambda name: asked.append(name) or f"<{name}>"
        self.assertEqual(h.psum_num_recv_tokens_per_scaleup_rank, "<psum_num_recv_tokens_per_scaleup_rank>")
        self.assertEqual(h.psum_num_recv_tokens_per_scaleup_rank, "<psum_num_recv_tokens_per_scaleup_rank>")
        h.recv_src_metadata = "sliced"  # V2's test slices it in place
        self.assertEqual(h.recv_src_metadata, "sliced")
        self.assertEqual(asked, ["psum_num_recv_tokens_per_scaleup_rank"])
        self.assertEqual((h.num_recv_tokens, h.num_expanded_tokens, h.num_recv_tokens_per_expert_list), (40, 96, []))
        self.assertIsNone(h.token_metadata_at_forward)
        self.assertIsNone(h.deterministic_sort())
        with self.assertRaises(AttributeError):
            h.no_such_field  # noqa: B018
        with self.assertRaises(AssertionError):
            deep_ep.EPHandle(False, EXPERTS, 1, MAX_TOKENS, 20, None, 0, 0, [])

    def test_unsupported_calls_name_the_feature(self):
        b = buffer_shape(4, 4)
        for call, feature in ((lambda: b.engram_fetch(None), "Engram"), (lambda: b.pp_send(None, 1), "pipeline"),
                              (lambda: b.all_gather(None), "AGRS"),
                              (lambda: deep_ep.ElasticBuffer.get_agrs_buffer_size_hint(None, 1), "AGRS")):
            with self.subTest(feature=feature), self.assertRaisesRegex(NotImplementedError, feature):
                call()

    def test_destroy_needs_the_flag(self):
        b = buffer_shape(4, 4)
        b.explicitly_destroy, b.runtime = False, None
        with self.assertRaises(AssertionError):
            b.destroy()
        b.explicitly_destroy = True
        b.destroy()  # nothing held: no-op


if __name__ == "__main__":
    unittest.main()
