"""epkit.deep_ep on a machine without PyTorch or a GPU: the package imports,
says why it cannot run, and refuses the arguments DeepEP V1 refuses."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import epkit  # noqa: E402
import epkit.deep_ep as deep_ep  # noqa: E402
from epkit import _native  # noqa: E402
from epkit.deep_ep import _checks  # noqa: E402
from epkit.deep_ep.buffer import DispatchHandle, _native_handle  # noqa: E402
from fake_tensor import FakeTensor as T  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

RANKS, TOKENS, HIDDEN, TOPK, EXPERTS = 4, 16, 256, 8, 32

# Where CTest provides the library (a CUDA build sets EPKIT_LIBRARY), a load
# failure is a failure: skipping would pass the entry having checked nothing.
PROVIDED_LIBRARY = os.environ.get("EPKIT_LIBRARY")


def dispatch_args(**over):
    args = dict(x=T((TOKENS, HIDDEN), "bfloat16"), x_scales=None, handle_given=False,
                num_tokens_per_rank=T((RANKS,), "int32"), is_token_in_rank=T((TOKENS, RANKS), "bool"),
                num_tokens_per_expert=T((EXPERTS,), "int32"), topk_idx=T((TOKENS, TOPK), "int64"),
                topk_weights=T((TOKENS, TOPK), "float32"), num_ranks=RANKS, expert_alignment=1,
                num_worst_tokens=0)
    args.update(over)
    return args


class ImportWithoutGpu(unittest.TestCase):
    def test_says_why_it_cannot_run(self):
        why = epkit.why_unavailable()
        self.assertIsNotNone(why, "this CPU test machine cannot run the engine")
        self.assertRegex(why, "libepkit_ep|PyTorch|CUDA|device")

    @unittest.skipIf(HAVE_TORCH, "PyTorch is installed here")
    def test_buffer_and_topk_idx_t_name_pytorch(self):
        with self.assertRaisesRegex(ImportError, "needs PyTorch"):
            deep_ep.Buffer(None, int(1e9))
        with self.assertRaisesRegex(AttributeError, "needs PyTorch"):
            deep_ep.topk_idx_t  # noqa: B018

    def test_unsupported_modes_name_the_feature(self):
        cases = [(dict(enable_shrink=True), "shrink"), (dict(use_fabric=True), "fabric")]
        for kwargs, feature in cases:
            with self.subTest(feature=feature):
                with self.assertRaisesRegex(NotImplementedError, feature):
                    deep_ep.Buffer(None, int(1e9), **kwargs)


class Library(unittest.TestCase):
    def setUp(self):
        try:
            self.lib = _native.load()
        except ImportError as e:
            if PROVIDED_LIBRARY:
                self.fail(f"EPKIT_LIBRARY={PROVIDED_LIBRARY} is set but the library does not load: {e}")
            self.skipTest(str(e))
        if PROVIDED_LIBRARY and str(self.lib.path) != PROVIDED_LIBRARY:
            self.fail(f"EPKIT_LIBRARY={PROVIDED_LIBRARY} is set but the library does not load: "
                      f"{self.lib.path} was loaded instead")

    def test_abi_and_errors(self):
        self.assertEqual(self.lib.abi_version(), _native.ABI_VERSION)
        self.assertTrue(self.lib.version())
        bytes_out = _native.ctypes.c_uint64()
        opts = _native.Options()
        self.lib.check(self.lib.default_options(_native.ctypes.byref(opts)))
        with self.assertRaisesRegex(_native.EngineError, r"invalid.*1 to 8 ranks"):
            self.lib.check(self.lib.bytes_needed(_native.ctypes.byref(opts), 9, _native.ctypes.byref(bytes_out)))
        self.lib.check(self.lib.bytes_needed(_native.ctypes.byref(opts), 4, _native.ctypes.byref(bytes_out)))
        self.assertGreater(bytes_out.value, 4096 * 7168 * 2)
        self.assertEqual(deep_ep.Config().get_nvl_buffer_size_hint(7168 * 2, 4), bytes_out.value)

    def test_internode_sizes(self):
        opts = _native.Options()
        self.lib.check(self.lib.default_options(_native.ctypes.byref(opts)))
        self.assertEqual(opts.ranks_per_node, 0)
        opts.ranks_per_node, opts.max_tokens = 8, 256
        two_nodes, one_node = _native.ctypes.c_uint64(), _native.ctypes.c_uint64()
        self.lib.check(self.lib.bytes_needed(_native.ctypes.byref(opts), 16, _native.ctypes.byref(two_nodes)))
        self.lib.check(self.lib.bytes_needed(_native.ctypes.byref(opts), 8, _native.ctypes.byref(one_node)))
        self.assertGreater(two_nodes.value, one_node.value)
        with self.assertRaisesRegex(_native.EngineError, "whole nodes"):
            self.lib.check(self.lib.bytes_needed(_native.ctypes.byref(opts), 12, _native.ctypes.byref(two_nodes)))

    def test_low_latency_size_hint(self):
        hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(128, 7168, 8, 288)
        # At least the two buffers of expert-major BF16 rows a rank can receive.
        self.assertGreater(hint, 2 * (288 // 8) * 8 * 128 * 7168 * 2)
        self.assertGreater(hint, deep_ep.Buffer.get_low_latency_rdma_size_hint(64, 7168, 8, 288))
        with self.assertRaisesRegex(_native.EngineError, "positive"):
            deep_ep.Buffer.get_low_latency_rdma_size_hint(0, 7168, 8, 288)

    def test_struct_layouts_match_the_library(self):
        for name, struct in _native.STRUCTS.items():
            with self.subTest(struct=name):
                self.assertEqual(self.lib.struct_size(name.encode()), _native.ctypes.sizeof(struct))

    def test_no_device_is_named(self):
        count = _native.ctypes.c_int32(-1)
        status = self.lib.device_count(_native.ctypes.byref(count))
        if status == _native.OK:
            self.skipTest("this machine has a GPU")
        self.assertEqual(status, _native.ERR_UNAVAILABLE)
        self.assertIn("CUDA", self.lib.last_error())

    def test_env_variable_comes_first(self):
        before = os.environ.get("EPKIT_LIBRARY")
        os.environ["EPKIT_LIBRARY"] = "/nonexistent/libepkit_ep.so"
        try:
            self.assertEqual(str(_native.candidates()[0]), "/nonexistent/libepkit_ep.so")
        finally:
            if before is None:
                del os.environ["EPKIT_LIBRARY"]
            else:
                os.environ["EPKIT_LIBRARY"] = before


class NetworkLegFromEnvironment(unittest.TestCase):
    """$EPKIT_NETWORK_LEG and the emulated NIC's numbers reach DeepEP's tests
    unchanged; a bad value is refused by its variable's name."""

    def test_defaults_and_choices(self):
        from epkit.deep_ep.buffer import network_leg_options as leg
        self.assertEqual(leg({}), (0, 50.0, 2.0))
        self.assertEqual(leg({"EPKIT_NETWORK_LEG": "emulated", "EPKIT_NIC_GBPS": "5",
                              "EPKIT_NIC_LATENCY_US": "0"}), (1, 5.0, 0.0))
        self.assertEqual(leg({"EPKIT_NETWORK_LEG": ""}, 7.0, 3.0), (0, 7.0, 3.0))

    def test_bad_values_are_named(self):
        from epkit.deep_ep.buffer import network_leg_options as leg
        for env, says in [({"EPKIT_NETWORK_LEG": "rdma"}, "EPKIT_NETWORK_LEG must be nccl or emulated"),
                          ({"EPKIT_NIC_GBPS": "fast"}, "EPKIT_NIC_GBPS must be a number"),
                          ({"EPKIT_NIC_GBPS": "nan"}, "EPKIT_NIC_GBPS = nan"),
                          ({"EPKIT_NIC_GBPS": "0"}, "EPKIT_NIC_GBPS = 0"),
                          ({"EPKIT_NIC_LATENCY_US": "-1"}, "EPKIT_NIC_LATENCY_US = -1"),
                          ({"EPKIT_NETWORK_LEG": "x" * 5000}, "not 'xxxx")]:
            with self.subTest(env=str(env)[:60]):
                with self.assertRaisesRegex(ValueError, says):
                    leg(env)

    def test_ranks_per_node_from_env(self):
        """$EPKIT_RANKS_PER_NODE fakes nodes on one host (DeepEP's V1 tests
        launch one process group per faked node); unset or empty: None."""
        from epkit.deep_ep.buffer import ranks_per_node_from_env as per_node
        self.assertIsNone(per_node({}))
        self.assertIsNone(per_node({"EPKIT_RANKS_PER_NODE": ""}))
        self.assertEqual(per_node({"EPKIT_RANKS_PER_NODE": "2"}), 2)
        for bad in ["0", "9", "-1", "two", "2 ", "x" * 5000]:
            with self.subTest(value=bad[:20]):
                with self.assertRaisesRegex(ValueError, "EPKIT_RANKS_PER_NODE must be an integer from 1 to 8"):
                    per_node({"EPKIT_RANKS_PER_NODE": bad})

    def test_library_defaults(self):
        lib = _native.load()
        options = _native.Options()
        lib.check(lib.default_options(_native.ctypes.byref(options)))
        self.assertEqual((options.network_leg, options.emulated_nic_gbps, options.emulated_nic_latency_us,
                          options.internode_rings), (0, 50.0, 2.0, 0))

    def test_ring_mode(self):
        from epkit.deep_ep.buffer import ring_mode_option as rings
        self.assertEqual(rings({}), 0)
        self.assertEqual(rings({"EPKIT_INTERNODE_RINGS": ""}), 0)
        self.assertEqual(rings({"EPKIT_INTERNODE_RINGS": "1"}), 1)
        for bad in ["yes", "2", "1 ", "x" * 5000]:
            with self.subTest(value=bad[:20]):
                with self.assertRaisesRegex(ValueError, "EPKIT_INTERNODE_RINGS must be 0 or 1"):
                    rings({"EPKIT_INTERNODE_RINGS": bad})


class ConfigAndStatics(unittest.TestCase):
    def test_config_checks_as_deepep(self):
        c = deep_ep.Config(24, 8, 256)
        self.assertEqual((c.num_sms, c.num_max_rdma_chunked_recv_tokens), (24, 258))  # aligned up to 6
        for bad in [(-1,), (24, 0, 256), (24, 256, 256), (24, 8, 256, 0, 256), (24, 8, 256, 6, 6)]:
            with self.subTest(args=bad), self.assertRaises(AssertionError):
                deep_ep.Config(*bad)

    def test_set_num_sms_and_configs(self):
        saved = deep_ep.Buffer.num_sms
        try:
            with self.assertRaisesRegex(AssertionError, "even"):
                deep_ep.Buffer.set_num_sms(23)
            deep_ep.Buffer.set_num_sms(24)
            self.assertEqual(deep_ep.Buffer.get_dispatch_config(8).num_sms, 24)
            self.assertEqual(deep_ep.Buffer.get_combine_config(2).num_max_nvl_chunked_send_tokens, 10)
            with self.assertRaisesRegex(AssertionError, "Unsupported number of EP ranks: 3"):
                deep_ep.Buffer.get_dispatch_config(3)
        finally:
            deep_ep.Buffer.num_sms = saved
        self.assertTrue(deep_ep.Buffer.is_sm90_compiled())

    def test_engine_config_follows_the_fields(self):
        c = deep_ep.Config(24, 8, 256)
        first = c.native()
        self.assertEqual((first.num_sms, first.num_warps, first.nvl_chunk), (24, 32, 4))
        self.assertIs(c.native(), first)
        c.nvl_chunk = 8
        self.assertEqual(c.native().nvl_chunk, 8)

    def test_default_configs_follow_num_sms(self):
        buffer = deep_ep.Buffer.__new__(deep_ep.Buffer)  # no engine: only the config cache
        buffer.group_size = 4
        saved = deep_ep.Buffer.num_sms
        try:
            from epkit.deep_ep.buffer import _COMBINE_CONFIGS, _DISPATCH_CONFIGS
            self.assertEqual(buffer._default_config(_DISPATCH_CONFIGS).num_sms, saved)
            deep_ep.Buffer.set_num_sms(24)
            self.assertEqual(buffer._default_config(_DISPATCH_CONFIGS).num_sms, 24)
            self.assertEqual(buffer._default_config(_COMBINE_CONFIGS).num_max_nvl_chunked_send_tokens, 9)
            buffer = deep_ep.Buffer.__new__(deep_ep.Buffer)
            buffer.group_size = 3
            with self.assertRaisesRegex(AssertionError, "Unsupported number of EP ranks: 3"):
                buffer._default_config(_DISPATCH_CONFIGS)
        finally:
            deep_ep.Buffer.num_sms = saved

    def test_bias_unpacking(self):
        self.assertEqual(deep_ep.Buffer._unpack_bias(None), (None, None))
        self.assertEqual(deep_ep.Buffer._unpack_bias((1, 2)), (1, 2))
        with self.assertRaises(AssertionError):
            deep_ep.Buffer._unpack_bias((1, 2, 3))

    def test_event_overlap_without_event(self):
        with deep_ep.EventOverlap() as e:
            self.assertIsNone(e.event)
        with self.assertRaises(AssertionError):
            deep_ep.EventOverlap().current_stream_wait()


class ArgumentChecks(unittest.TestCase):
    def refused(self, pattern, **over):
        with self.assertRaisesRegex(AssertionError, pattern):
            _checks.dispatch(**dispatch_args(**over))

    def test_error_is_assertion_and_runtime_error(self):
        self.assertTrue(issubclass(deep_ep.EPAssertionError, AssertionError))
        self.assertTrue(issubclass(deep_ep.EPAssertionError, RuntimeError))

    def test_valid_dispatches_pass(self):
        _checks.dispatch(**dispatch_args())
        _checks.dispatch(**dispatch_args(topk_idx=None, topk_weights=None))
        _checks.dispatch(**dispatch_args(x=T((TOKENS, HIDDEN), "float8_e4m3fn"),
                                         x_scales=T((TOKENS, HIDDEN // 128), "float32", contiguous=False)))
        _checks.dispatch(**dispatch_args(handle_given=True, topk_idx=None, topk_weights=None,
                                         num_tokens_per_rank=None, num_tokens_per_expert=None))

    def test_dispatch_refusals(self):
        self.refused("cached dispatch", handle_given=True)
        self.refused("get_dispatch_layout", num_tokens_per_rank=None)
        self.refused("contiguous 2-D", x=T((TOKENS, HIDDEN), "bfloat16", contiguous=False))
        self.refused("bfloat16, or torch.float8", x=T((TOKENS, HIDDEN), "float32"))
        self.refused("multiple of 128", x=T((TOKENS, 200), "bfloat16"))
        self.refused("needs x_scales", x=T((TOKENS, HIDDEN), "float8_e4m3fn"))
        self.refused("x_scales must be torch.float32", x=T((TOKENS, HIDDEN), "float8_e4m3fn"),
                     x_scales=T((TOKENS, 2), "bfloat16"))
        self.refused(r"hidden / 128", x=T((TOKENS, HIDDEN), "float8_e4m3fn"), x_scales=T((TOKENS, 3), "float32"))
        self.refused("go with FP8", x_scales=T((TOKENS, 2), "float32"))
        self.refused(r"is_token_in_rank must be \[16, 4\]", is_token_in_rank=T((TOKENS, 2), "bool"))
        self.refused("torch.bool", is_token_in_rank=T((TOKENS, RANKS), "int32"))
        self.refused("multiple of the rank count", num_tokens_per_expert=T((30,), "int32"))
        self.refused("4 entries", num_tokens_per_rank=T((2,), "int32"))
        self.refused("together", topk_weights=None)
        self.refused("torch.int64", topk_idx=T((TOKENS, TOPK), "int32"))
        self.refused("one row per token", topk_idx=T((8, TOPK), "int64"), topk_weights=T((8, TOPK), "float32"))
        self.refused("expert_alignment", expert_alignment=0)
        self.refused("num_worst_tokens", num_worst_tokens=-1)

    def test_layout_combine_and_streams(self):
        _checks.layout(T((TOKENS, TOPK), "int64"), EXPERTS)
        with self.assertRaisesRegex(AssertionError, "topk_idx_t"):
            _checks.layout(T((TOKENS, TOPK), "int32"), EXPERTS)
        with self.assertRaisesRegex(AssertionError, "num_experts"):
            _checks.layout(T((TOKENS, TOPK), "int64"), 0)
        _checks.combine(T((40, HIDDEN), "bfloat16"), T((40, TOPK), "float32"), 40)
        with self.assertRaisesRegex(AssertionError, "40 received rows"):
            _checks.combine(T((39, HIDDEN), "bfloat16"), None, 40)
        with self.assertRaisesRegex(AssertionError, "torch.float32"):
            _checks.combine(T((40, HIDDEN), "bfloat16"), T((40, TOPK), "bfloat16"), 40)
        with self.assertRaisesRegex(AssertionError, "previous_event and async_finish"):
            _checks.order_flags(None, True, True)
        _checks.order_flags(object(), True, True)
        with self.assertRaisesRegex(AssertionError, "even"):
            _checks.config(deep_ep.Config(23), "dispatch")

    def test_descriptors(self):
        d = _checks.describe(T((TOKENS, HIDDEN), "float8_e4m3fn", ptr=0x1234), "x")
        self.assertEqual((d.data, d.dtype, d.ndim), (0x1234, _native.FP8_E4M3, 2))
        self.assertEqual((list(d.shape), list(d.strides)), ([TOKENS, HIDDEN, 0], [HIDDEN, 1, 0]))
        self.assertEqual(_checks.describe(None, "x").ndim, 0)
        with self.assertRaisesRegex(AssertionError, "float16"):
            _checks.describe(T((4, 4), "float16"), "x")

    def test_handle_must_come_from_epkit(self):
        with self.assertRaisesRegex(TypeError, "epkit.deep_ep.Buffer.dispatch"):
            _native_handle((None,) * 6)
        h = DispatchHandle(("prefix", None, None, "src", "in_rank", None), native=None)
        self.assertEqual((len(h), h[0], h[4]), (6, "prefix", "in_rank"))
        h = DispatchHandle(("in_rank",) + (None,) * 5 + ("gbl_prefix",) + (None,) * 3, native=None)
        self.assertEqual((len(h), h[0], h[-4]), (10, "in_rank", "gbl_prefix"))

    def test_low_latency_checks(self):
        x, idx = T((TOKENS, HIDDEN), "bfloat16"), T((TOKENS, TOPK), "int64")
        _checks.low_latency_dispatch(x, idx, 128, EXPERTS, False, True)
        with self.assertRaisesRegex(AssertionError, "exclude each other"):
            _checks.low_latency_dispatch(x, idx, 128, EXPERTS, True, True)
        with self.assertRaisesRegex(AssertionError, "more than num_max_dispatch_tokens_per_rank"):
            _checks.low_latency_dispatch(x, idx, 8, EXPERTS, False, False)
        with self.assertRaisesRegex(AssertionError, "torch.int64"):
            _checks.low_latency_dispatch(x, T((TOKENS, TOPK), "int32"), 128, EXPERTS, False, False)
        buffer = deep_ep.Buffer.__new__(deep_ep.Buffer)
        buffer.low_latency_mode = False
        with self.assertRaisesRegex(AssertionError, "low_latency_mode=True"):
            buffer.low_latency_dispatch(x, idx, 128, EXPERTS)
        buffer.low_latency_mode = True
        with self.assertRaisesRegex(NotImplementedError, "LogFMT"):
            buffer.low_latency_combine(None, idx, None, None, use_logfmt=True)
        with self.assertRaisesRegex(TypeError, "low_latency_dispatch"):
            buffer.low_latency_combine(None, idx, None, (None,) * 5)

    def test_internode_methods_need_nodes(self):
        buffer = deep_ep.Buffer.__new__(deep_ep.Buffer)  # no engine: the node count only
        buffer.num_nodes = 1
        with self.assertRaisesRegex(AssertionError, "several nodes"):
            buffer.internode_dispatch(None)
        with self.assertRaisesRegex(AssertionError, "several nodes"):
            buffer.internode_combine(None, None)


class Paths(unittest.TestCase):
    """Which path reaches the engine, and the pieces both paths share."""

    def test_no_extension_is_said(self):
        from epkit.deep_ep import buffer as b
        saved, saved_env = b._EXTENSION, os.environ.get("EPKIT_NO_EXTENSION")
        try:
            b._EXTENSION = None
            os.environ["EPKIT_NO_EXTENSION"] = "1"
            self.assertEqual(b._extension(), (None, "EPKIT_NO_EXTENSION=1"))
        finally:
            b._EXTENSION = saved
            if saved_env is None:
                os.environ.pop("EPKIT_NO_EXTENSION", None)
            else:
                os.environ["EPKIT_NO_EXTENSION"] = saved_env

    def test_a_failed_first_use_build_falls_back_to_ctypes(self):
        from epkit import _build_ext
        from epkit.deep_ep import buffer as b
        saved = (b._EXTENSION, b._native.load, _build_ext.compiled_on_first_use,
                 os.environ.pop("EPKIT_NO_EXTENSION", None), os.environ.pop("EPKIT_BUILD_EXTENSION", None))

        def fails():
            raise PermissionError("~/.cache is read-only")
        try:
            b._EXTENSION = None
            b._native.load = lambda: None
            _build_ext.compiled_on_first_use = fails
            module, why = b._extension()
            self.assertIsNone(module)
            self.assertIn("compiling it failed: PermissionError: ~/.cache is read-only", why)
        finally:
            b._EXTENSION, b._native.load, _build_ext.compiled_on_first_use = saved[:3]
            for name, value in (("EPKIT_NO_EXTENSION", saved[3]), ("EPKIT_BUILD_EXTENSION", saved[4])):
                if value is not None:
                    os.environ[name] = value

    def test_event_pointer(self):
        from epkit.deep_ep.buffer import _event_ptr

        class Ev:
            ptr = 1234
        self.assertEqual(_event_ptr(None), 0)
        self.assertEqual(_event_ptr(Ev()), 1234)
        self.assertEqual(_event_ptr(deep_ep.EventOverlap(Ev())), 1234)

    def test_hook_calls_once_then_releases(self):
        from epkit.deep_ep.buffer import _Hook
        calls = []
        hook = _Hook(7, ("kept",), (lambda p: calls.append(("call", p)), lambda p: calls.append(("release", p))))
        hook()
        self.assertEqual(calls, [("call", 7), ("release", 7)])
        with self.assertRaisesRegex(AssertionError, "called already"):
            hook()
        unused = _Hook(8, (), (lambda p: calls.append(("call", p)), lambda p: calls.append(("release", p))))
        del unused
        self.assertEqual(calls[-1], ("release", 8))

    def test_low_latency_handle_from_either_path(self):
        # ctypes: a handle that is not low_latency_dispatch's is refused
        # before any call.
        buffer = deep_ep.Buffer.__new__(deep_ep.Buffer)
        buffer.low_latency_mode = True
        buffer._engine = None
        idx = T((TOKENS, TOPK), "int64")
        with self.assertRaisesRegex(TypeError, "low_latency_dispatch"):
            buffer.low_latency_combine(None, idx, None, (None,) * 5)

        # The extension gets the handle as given (it reads `native` itself,
        # and refuses one without it: tests/python/device/low_latency_api.py).
        class Engine:
            def low_latency_combine(self, *args):
                self.args = args
                return "out", "event", None
        buffer._engine = engine = Engine()
        buffer.low_latency_num_sms = 24
        handle = deep_ep.buffer.LowLatencyHandle((None,) * 5)
        handle.native = b"raw"
        self.assertEqual(buffer.low_latency_combine("x", idx, "w", handle), ("out", "event", None))
        self.assertIs(engine.args[3], handle)
        self.assertEqual(engine.args[0], "x")


if __name__ == "__main__":
    unittest.main()
