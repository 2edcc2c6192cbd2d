"""deep_ep.Buffer over epkit's engine (normal mode, intranode and internode).

Every operation queues the engine's kernels on the Buffer's communication
stream. Outputs are tensors the caller owns, from PyTorch's caching
allocator: a layout and a combine write them directly, a dispatch's
received rows are copied out of the Buffer by one kernel. `zero_copy=True`
returns the Buffer's views instead, valid until the next operation of the
same kind.

Two paths reach the engine: the compiled extension epkit._C (built against
the installed PyTorch, csrc/torch_ext.cc) when it imports, else ctypes over
the C ABI (`EPKIT_NO_EXTENSION=1` forces ctypes). `Buffer.path` says which.
"""

import ctypes
import os
from typing import List, Optional, Tuple

from .. import _native
from . import _checks
from ._checks import require
from ._events import Config, EventHandle, EventOverlap, _current_stream

_byref = ctypes.byref

# Intranode dispatch and combine configs by rank count, as DeepEP tunes them.
_DISPATCH_CONFIGS = {2: (24, 256, 6, 128), 4: (6, 256, 6, 128), 8: (6, 256, 6, 128),
                     16: (36, 288, 20, 128), 24: (32, 288, 8, 128), 32: (32, 288, 8, 128),
                     48: (32, 288, 8, 128), 64: (32, 288, 8, 128), 96: (20, 480, 12, 128),
                     128: (20, 560, 12, 128), 144: (32, 720, 12, 128), 160: (28, 720, 12, 128)}
_COMBINE_CONFIGS = {2: (10, 256, 6, 128), 4: (9, 256, 6, 128), 8: (4, 256, 6, 128),
                    16: (4, 288, 12, 128), 24: (1, 288, 8, 128), 32: (1, 288, 8, 128),
                    48: (1, 288, 8, 128), 64: (1, 288, 8, 128), 96: (1, 480, 8, 128),
                    128: (1, 560, 8, 128), 144: (2, 720, 8, 128), 160: (2, 720, 8, 128)}

_MAX_TOKENS_CAP = 1 << 16


_EXTENSION = None  # (module or None, why not) once looked up


def _extension():
    """epkit._C when it imports and matches the loaded library, else None
    and the reason (the ctypes path then serves every call)."""
    global _EXTENSION
    if _EXTENSION is None:
        if os.environ.get("EPKIT_NO_EXTENSION") == "1":
            _EXTENSION = (None, "EPKIT_NO_EXTENSION=1")
        else:
            try:
                _native.load()  # the extension takes the C ABI from this library
                try:
                    from .. import _C
                except ImportError as missing:
                    if os.environ.get("EPKIT_BUILD_EXTENSION") == "0":
                        raise
                    from .._build_ext import compiled_on_first_use
                    try:
                        _C = compiled_on_first_use()
                    except Exception as e:  # noqa: BLE001 - a compiler, a cache folder, PyTorch's builder
                        # Any failure of the first-use build leaves the ctypes path, named.
                        raise ImportError(f"{missing}; compiling it failed: {type(e).__name__}: {e}") from e
                if _C.ABI_VERSION != _native.ABI_VERSION:
                    _EXTENSION = (None, f"epkit._C was built for C ABI {_C.ABI_VERSION}, "
                                        f"the package speaks {_native.ABI_VERSION}")
                else:
                    # The low-latency calls build their results in C++.
                    _C.set_types(LowLatencyHandle, EventOverlap, EventHandle)
                    _EXTENSION = (_C, None)
            except ImportError as e:
                _EXTENSION = (None, f"epkit._C is not built ({e}); python -m epkit._build_ext builds it")
    return _EXTENSION


def _event(ptr: int) -> "EventOverlap":
    return EventOverlap(EventHandle(ptr) if ptr else None)


def _event_ptr(previous_event) -> int:
    if previous_event is None:
        return 0
    event = getattr(previous_event, "event", previous_event)
    return event.ptr or 0


def _torch(user: str = "epkit.deep_ep.Buffer"):
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"{user} needs PyTorch, which is not importable here ({e})") from e
    return torch


def _not_implemented(feature: str):
    return NotImplementedError(f"epkit.deep_ep: {feature} is not implemented yet "
                               "(epkit's engine does normal mode: 1-8 ranks of one node, or nodes of "
                               "1-8 ranks over NCCL)")


class _NativeHandle:
    """Owns one reference to the engine's dispatch handle."""

    __slots__ = ("ptr", "rows", "_lib")

    def __init__(self, lib, ptr: int, rows: int):
        self._lib, self.ptr, self.rows = lib, ptr, rows

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr:
            try:
                self._lib.handle_release(ptr)
            except Exception:  # interpreter shutdown
                pass


def layout_then_dispatch(v1, x, x_scales, topk_idx, topk_weights, num_experts: int, expert_alignment: int,
                         num_worst_tokens: int, config, copy_topk: bool):
    """Buffer._layout_dispatch in two steps over a V1 Buffer's entries (the
    ctypes path, across nodes, and the CPU simulation's stand-in engine)."""
    if copy_topk:
        per_rank, per_node, per_expert, in_rank, copy = v1._layout_and_copy(topk_idx, num_experts)
    else:
        per_rank, per_node, per_expert, in_rank, _ = v1.get_dispatch_layout(topk_idx, num_experts)
        copy = None
    out = v1._dispatch_plain(x, x_scales, per_rank, per_node, in_rank, per_expert, topk_idx, topk_weights,
                             expert_alignment, num_worst_tokens, config)
    return out[:5] + (copy,)


class DispatchHandle(tuple):
    """DeepEP's handle tuple plus the engine's routing.

    Intranode, 6 entries: (rank_prefix_matrix, channel_prefix_matrix,
    recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank, send_head).
    Internode, 10: (is_token_in_rank, rdma_channel_prefix_matrix,
    gbl_channel_prefix_matrix, recv_rdma_channel_prefix_matrix,
    recv_rdma_rank_prefix_sum, recv_gbl_channel_prefix_matrix,
    recv_gbl_rank_prefix_sum, recv_src_meta, send_rdma_head, send_nvl_head).
    Entries with no counterpart in epkit's engine (the channel matrices, the
    heads, the source metadata) are None."""

    native: _NativeHandle

    def __new__(cls, items, native: _NativeHandle):
        self = super().__new__(cls, items)
        self.native = native
        return self


def _native_handle(handle) -> _NativeHandle:
    native = getattr(handle, "native", None)
    if not isinstance(native, _NativeHandle):
        raise TypeError("the handle must come from epkit.deep_ep.Buffer.dispatch")
    return native


class _View:
    """__cuda_array_interface__ of an engine view (zero-copy opt-in)."""

    _TYPESTR = {_native.BF16: "<i2", _native.FP8_E4M3: "|u1", _native.FP32: "<f4", _native.INT32: "<i4",
                _native.INT64: "<i8", _native.BOOL: "|b1"}
    _SIZE = {_native.BF16: 2, _native.FP8_E4M3: 1, _native.FP32: 4, _native.INT32: 4, _native.INT64: 8,
             _native.BOOL: 1}

    def __init__(self, t: _native.Tensor):
        size = self._SIZE[t.dtype]
        shape = tuple(t.shape[i] for i in range(t.ndim))
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": self._TYPESTR[t.dtype], "data": (t.data or 0, False),
            "strides": tuple(t.strides[i] * size for i in range(t.ndim)), "version": 2}



_NETWORK_LEGS = {"nccl": 0, "emulated": 1}


def ring_mode_option(environ) -> int:
    """$EPKIT_INTERNODE_RINGS: 1 for ring mode (dispatch and combine through
    fixed rings, the Buffer's memory independent of the node count; needs
    EPKIT_NETWORK_LEG=emulated), 0 or unset for the bucket mode. Anything
    else is refused by name."""
    text = environ.get("EPKIT_INTERNODE_RINGS", "") or "0"
    if text not in ("0", "1"):
        raise ValueError(f"EPKIT_INTERNODE_RINGS must be 0 or 1, not {text[:40]!r}")
    return int(text)


def ranks_per_node_from_env(environ) -> Optional[int]:
    """$EPKIT_RANKS_PER_NODE (how a test fakes nodes on one host), or None
    when unset or empty."""
    env = environ.get("EPKIT_RANKS_PER_NODE", "")
    if not env:
        return None
    if env not in ("1", "2", "3", "4", "5", "6", "7", "8"):
        raise ValueError(f"EPKIT_RANKS_PER_NODE must be an integer from 1 to 8, not {env[:40]!r}")
    return int(env)


def network_leg_options(environ, gbps: float = 50.0, latency_us: float = 2.0) -> Tuple[int, float, float]:
    """The network leg an internode Buffer uses, from $EPKIT_NETWORK_LEG
    (nccl, the default, or emulated: the device-driven leg over an emulated
    NIC, for nodes faked on one host's GPUs) with $EPKIT_NIC_GBPS and
    $EPKIT_NIC_LATENCY_US for the emulated NIC. Set by the environment so that
    DeepEP's own tests reach it unchanged; a bad value is refused by name."""
    name = environ.get("EPKIT_NETWORK_LEG", "nccl") or "nccl"
    if name not in _NETWORK_LEGS:
        raise ValueError(f"EPKIT_NETWORK_LEG must be nccl or emulated, not {name[:40]!r}")

    def number(variable: str, default: float, low: float, high: float) -> float:
        text = environ.get(variable, "")
        if text == "":
            return default
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{variable} must be a number, not {text[:40]!r}") from None
        if not low <= value <= high:  # also refuses nan
            raise ValueError(f"{variable} = {text[:40]}: {low:g} to {high:g}")
        return value

    return (_NETWORK_LEGS[name], number("EPKIT_NIC_GBPS", gbps, 0.001, 10000.0),
            number("EPKIT_NIC_LATENCY_US", latency_us, 0.0, 1e6))


def wants_output_arena(has_extension: bool, num_nodes: int, num_nvl_bytes: int, max_tokens: Optional[int]) -> bool:
    """The output arena serves the extension's dispatch outputs on one node,
    for a Buffer sized in bytes or in tokens (an ElasticBuffer's is)."""
    return has_extension and num_nodes == 1 and (num_nvl_bytes > 0 or max_tokens is not None)


def output_pool_bytes(rows: int, hidden: int, topk: int) -> int:
    """An output arena for one dispatch of `rows` received rows: BF16 rows,
    FP8 scales, top-k indices and weights, the source index, plus the
    caching allocator's rounding of its five tensors to 20 MiB segments
    (2 MiB aligned). A dispatch that does not fit is copied out instead."""
    row = hidden * 2 + hidden // 128 * 4 + topk * 12 + 4
    granule = 2 << 20
    total = rows * row + 5 * (20 << 20)
    return (total + granule - 1) // granule * granule


class Buffer:
    """DeepEP's Buffer (V1, commit 29d31c0) over epkit's engine.

    More ranks than one node holds make an internode Buffer: nodes of
    min(ranks, 8) ranks as DeepEP counts them (epkit's `ranks_per_node`,
    else $EPKIT_RANKS_PER_NODE, overrides; the low-latency mode across nodes
    needs $EPKIT_NETWORK_LEG=emulated for now), NVLink inside a node and NCCL between nodes (or, with
    $EPKIT_NETWORK_LEG=emulated, the device-driven leg over an emulated NIC:
    `network_leg_options`).

    epkit-only keyword arguments: max_tokens (largest token count a rank
    passes; default: as many as num_nvl_bytes, plus num_rdma_bytes across
    nodes, holds), max_hidden, max_topk, zero_copy (outputs are views into
    the Buffer), timeout_s, ranks_per_node, output_pool_bytes (the output
    arena: memory beside num_nvl_bytes where a dispatch's outputs are
    allocated so that the senders write them directly; default: one
    dispatch at the Buffer's largest size; 0: none, outputs are copied out
    of the Buffer)."""

    num_sms: int = 20
    #: The extension's per-Buffer object (epkit._C.Engine), None on the ctypes path.
    _engine = None
    #: Blocks of the low-latency kernels (epkit-only): every rank's must be
    #: resident at once, so ranks sharing a GPU need this x ranks <= its SMs.
    low_latency_num_sms: int = 24

    def __init__(self, group, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 use_fabric: bool = False, explicitly_destroy: bool = False, enable_shrink: bool = False,
                 comm=None, *, max_tokens: Optional[int] = None, max_hidden: int = 7168, max_topk: int = 8,
                 zero_copy: bool = False, timeout_s: Optional[float] = None,
                 ranks_per_node: Optional[int] = None, output_pool_bytes: Optional[int] = None) -> None:
        self.runtime = None
        if enable_shrink:
            raise _not_implemented("shrink mode (enable_shrink=True)")
        if use_fabric:
            raise _not_implemented("fabric memory (use_fabric=True)")
        torch = _torch()
        self._torch = torch
        self._lib = lib = _native.load()

        if group is not None:
            self.rank, self.group, self.group_size = group.rank(), group, group.size()

            def all_gather_object(obj):
                out = [None] * self.group_size
                torch.distributed.all_gather_object(out, obj, group)
                return out
        elif comm is not None:
            self.rank, self.group, self.group_size = comm.Get_rank(), comm, comm.Get_size()

            def all_gather_object(obj):
                return comm.allgather(obj)
        else:
            raise ValueError("Either 'group' or 'comm' must be provided.")
        if ranks_per_node is None:
            ranks_per_node = ranks_per_node_from_env(os.environ)
        per_node = min(self.group_size, 8) if ranks_per_node is None else ranks_per_node
        require(1 <= per_node <= 8 and self.group_size % per_node == 0,
                f"{self.group_size} ranks do not make whole nodes of {per_node} ranks (1 to 8 per node)")
        self.ranks_per_node, self.num_nodes = per_node, self.group_size // per_node

        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self.enable_shrink = enable_shrink
        self.zero_copy = zero_copy

        options = _native.Options()
        lib.check(lib.default_options(_byref(options)))
        options.max_hidden, options.max_topk = max_hidden, max_topk
        if timeout_s is not None:
            options.timeout_s = timeout_s
        options.ranks_per_node = per_node if self.num_nodes > 1 else 0
        if self.num_nodes > 1:
            (options.network_leg, options.emulated_nic_gbps,
             options.emulated_nic_latency_us) = network_leg_options(
                 os.environ, options.emulated_nic_gbps, options.emulated_nic_latency_us)
            options.internode_rings = ring_mode_option(os.environ)
        if low_latency_mode:
            options.low_latency_bytes = int(num_rdma_bytes)
        options.max_tokens = max_tokens if max_tokens is not None else self._tokens_fitting(options)
        options.num_bytes = int(self._budget())
        self.max_tokens, self.max_hidden, self.max_topk = options.max_tokens, max_hidden, max_topk
        module, why_not = _extension() if not zero_copy else (None, "zero_copy=True uses the Buffer's views")
        pooled = wants_output_arena(module is not None, self.num_nodes, num_nvl_bytes, max_tokens)
        require(output_pool_bytes is None or 0 <= output_pool_bytes <= 1 << 40,
                f"output_pool_bytes = {output_pool_bytes}: 0 to 1 TiB")
        if output_pool_bytes is None:
            output_pool_bytes = self._default_pool_bytes() if pooled else 0
        options.output_arena_bytes = int(output_pool_bytes) if pooled else 0
        #: Bytes of the output arena (0: dispatch outputs are copied out of the Buffer).
        self.output_pool_bytes = options.output_arena_bytes

        self._device = torch.cuda.current_device()
        lib.check(lib.set_device(self._device))
        failure: List[BaseException] = []

        def gather(_user, mine, nbytes, out):
            try:
                parts = all_gather_object(ctypes.string_at(mine, nbytes))
                blob = b"".join(parts)
                if len(blob) != nbytes * self.group_size:
                    raise RuntimeError("ranks sent handshakes of different sizes")
                ctypes.memmove(out, blob, len(blob))
                return 0
            except BaseException as e:  # never unwind through C
                failure.append(e)
                return 1

        callback = _native.ALL_GATHER_FN(gather)
        runtime = ctypes.c_void_p()
        status = lib.buffer_create(self.rank, self.group_size, callback, None, _byref(options), _byref(runtime))
        if status != _native.OK:
            error = _native.EngineError(lib.status_name(status).decode(), lib.last_error())
            raise error from (failure[0] if failure else None)
        self.runtime = runtime.value
        stream = ctypes.c_void_p()
        lib.check(lib.buffer_info(self.runtime, None, None, _byref(stream)))
        nodes, network = ctypes.c_int32(), ctypes.c_char_p()
        lib.check(lib.buffer_nodes(self.runtime, _byref(nodes), _byref(network)))
        require(nodes.value == self.num_nodes, f"the engine made {nodes.value} nodes, not {self.num_nodes}")
        self.network = (network.value or b"").decode()
        self._comm_stream = torch.cuda.ExternalStream(stream.value, device=self._device)
        self._comm_ptr = stream.value
        self._dtypes = {_native.BF16: torch.bfloat16, _native.FP8_E4M3: torch.float8_e4m3fn,
                        _native.FP32: torch.float32, _native.INT32: torch.int32,
                        _native.INT64: torch.int64, _native.BOOL: torch.bool}
        self._cuda = torch.device("cuda", self._device)
        self._engine = None
        self._pool = None
        if module is not None:
            self._engine = module.Engine(self.runtime, self._device, self._comm_ptr, self.group_size,
                                         self.num_nodes)
        #: "extension" (epkit._C) or "ctypes: <why not the extension>".
        self.path = "extension" if self._engine is not None else f"ctypes: {why_not}"
        if self._engine is not None and self.output_pool_bytes > 0:
            self._use_pool(module)

    def _default_pool_bytes(self) -> int:
        return output_pool_bytes(self.group_size * self.max_tokens, self.max_hidden, self.max_topk)

    def _use_pool(self, module) -> None:
        """A torch.cuda.MemPool over the Buffer's output arena: dispatch
        outputs come from it (PyTorch's caching allocator, its stream rules
        and record_stream) and lie where the senders can write them."""
        torch = self._torch
        try:
            allocator = torch.cuda.memory.CUDAPluggableAllocator(
                module.__file__, "epkit_arena_alloc", "epkit_arena_free")
            pool = torch.cuda.MemPool(allocator.allocator())
            self._engine.use_arena(pool.id)
        except Exception as e:  # noqa: BLE001 - said in path; outputs are copied then
            self.path += f" (outputs copied: no MemPool over the arena: {e})"
            return
        self._pool, self._pool_allocator = pool, allocator

    def _budget(self) -> int:
        """Bytes the normal mode may take: num_nvl_bytes, and across nodes
        also num_rdma_bytes (the network leg's buckets live in the same
        budget), unless the low-latency mode holds them (its region)."""
        rdma = self.num_rdma_bytes if self.num_nodes > 1 and not self.low_latency_mode else 0
        return self.num_nvl_bytes + rdma

    def _tokens_fitting(self, options: _native.Options) -> int:
        """The most tokens per rank whose memory fits the budget (DeepEP
        sizes its buffers in bytes; the engine in tokens)."""
        budget = self._budget()
        if budget <= 0:
            # A low-latency Buffer without num_nvl_bytes has no normal mode in
            # DeepEP either: the smallest heap (normal calls then refuse).
            return 1 if self.low_latency_mode else options.max_tokens

        def need(tokens: int) -> int:
            options.max_tokens = tokens
            out = ctypes.c_uint64()
            self._lib.check(self._lib.bytes_needed(_byref(options), self.group_size, _byref(out)))
            return out.value

        if need(1) > budget:
            raise ValueError(f"num_nvl_bytes = {self.num_nvl_bytes} (num_rdma_bytes = {self.num_rdma_bytes}) "
                             f"does not hold one token of hidden {options.max_hidden} on {self.group_size} ranks "
                             f"({need(1)} bytes needed)")
        lo, hi = 1, _MAX_TOKENS_CAP
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if need(mid) <= budget else (lo, mid - 1)
        return lo

    # Lifetime -------------------------------------------------------------

    def destroy(self):
        assert self.explicitly_destroy, '`explicitly_destroy` flag must be set'
        self._release()

    def _release(self):
        runtime, self.runtime = self.runtime, None
        engine, self._engine = getattr(self, "_engine", None), None
        if engine is not None:
            engine.close()
        # Outputs still held from the pool lived in the Buffer's memory (as
        # zero-copy views do): they are gone with it.
        self._pool = None
        if runtime:
            self._lib.check(self._lib.synchronize(runtime))
            self._lib.buffer_destroy(runtime)

    def __del__(self):
        if getattr(self, "runtime", None) and not self.explicitly_destroy:
            try:
                self._release()
            except Exception:  # interpreter shutdown
                pass

    def _live(self):
        require(self.runtime is not None, "the Buffer was destroyed")
        return self.runtime

    # Static API -----------------------------------------------------------

    @staticmethod
    def is_sm90_compiled() -> bool:
        """epkit's kernels always carry the FP8 (E4M3) path."""
        return True

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        assert new_num_sms % 2 == 0, 'The SM count must be even'
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        return EventOverlap(EventHandle())

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        lib = _native.load()
        out = ctypes.c_uint64()
        lib.check(lib.ll_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts, _byref(out)))
        return out.value

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        assert num_ranks in _DISPATCH_CONFIGS, f'Unsupported number of EP ranks: {num_ranks}'
        return Config(Buffer.num_sms, *_DISPATCH_CONFIGS[num_ranks])

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        assert num_ranks in _COMBINE_CONFIGS, f'Unsupported number of EP ranks: {num_ranks}'
        return Config(Buffer.num_sms, *_COMBINE_CONFIGS[num_ranks])

    @staticmethod
    def _unpack_bias(bias):
        bias_0, bias_1 = None, None
        if isinstance(bias, tuple):
            assert len(bias) == 2
            bias_0, bias_1 = bias
        elif bias is not None:
            bias_0 = bias
        return bias_0, bias_1

    def _default_config(self, table) -> Config:
        """get_dispatch_config / get_combine_config, made once per SM count."""
        key = (id(table), Buffer.num_sms)
        cache = self.__dict__.setdefault("_configs", {})
        if key not in cache:
            assert self.group_size in table, f'Unsupported number of EP ranks: {self.group_size}'
            cache[key] = Config(Buffer.num_sms, *table[self.group_size])
        return cache[key]

    def get_comm_stream(self):
        return self._comm_stream

    def get_local_buffer_tensor(self, dtype, size=None, offset: int = 0, use_rdma_buffer: bool = False):
        """The Buffer's combine-input region (the part of its memory a caller
        may write: expert outputs placed there are combined in place)."""
        if use_rdma_buffer:
            raise _not_implemented("the RDMA buffer (use_rdma_buffer=True)")
        torch = self._torch
        view = _native.Tensor()
        rows = self.group_size * self.max_tokens
        self._lib.check(self._lib.combine_input(self._live(), rows, self.max_hidden, _byref(view)))
        tensor = torch.as_tensor(_View(view), device=self._cuda).view(torch.uint8).view(-1).view(dtype)[offset:]
        if size is None:
            return tensor
        assert tensor.numel() >= size.numel()
        return tensor[:size.numel()].view(size)

    # Stream plumbing ------------------------------------------------------

    def _engine_order(self, previous_event, async_finish: bool, stream: int) -> _native.Order:
        order = _native.Order()
        order.stream = stream
        if previous_event is not None:
            event = getattr(previous_event, "event", previous_event)
            order.previous = event.ptr
        if self.zero_copy:
            order.async_finish, order.want_event = int(async_finish), int(async_finish)
        else:
            # The copy into the caller's tensors finishes the operation.
            order.async_finish, order.want_event = 1, 0
        return order

    def _outputs(self, views, stream: int, async_finish: bool, allocate_on_comm_stream: bool,
                 engine_event) -> Tuple[list, Optional[EventHandle]]:
        """Tensors the caller owns for `views` (None where a view is absent),
        and the event when async_finish."""
        torch = self._torch
        if self.zero_copy:
            out = [None if (not v.data and v.ndim == 0) else self._as_view(v) for v in views]
            return out, (EventHandle(engine_event) if engine_event else None)
        out, dst, src = [], [], []
        with torch.cuda.stream(self._comm_stream) if allocate_on_comm_stream else _nullcontext():
            for v in views:
                if not v.data and v.ndim == 0:
                    out.append(None)
                    continue
                shape = (v.shape[0],) if v.ndim == 1 else (v.shape[0], v.shape[1])
                t = torch.empty(shape, dtype=self._dtypes[v.dtype], device=self._cuda)
                out.append(t)
                dst.append(_native.tensor(t.data_ptr(), v.dtype, shape, t.stride()))
                src.append(v)
        n = len(dst)
        order = _native.Order(stream, None, int(async_finish), int(async_finish))
        event = ctypes.c_void_p()
        self._lib.check(self._lib.copy(self.runtime, n, (_native.Tensor * n)(*dst), (_native.Tensor * n)(*src),
                                       _byref(order), _byref(event)))
        return out, (EventHandle(event.value) if event.value else None)

    def _as_view(self, v: _native.Tensor):
        t = self._torch.as_tensor(_View(v), device=self._cuda)
        if v.dtype in (_native.BF16, _native.FP8_E4M3):
            t = t.view(self._dtypes[v.dtype])
        return t

    def _record(self, async_finish: bool, allocate_on_comm_stream: bool, inputs, outputs) -> None:
        """DeepEP's record_stream rules: with async_finish the comm stream
        uses every tensor past the call."""
        if not async_finish or self.zero_copy:
            return
        compute = self._torch.cuda.current_stream()
        for t in inputs:
            if t is not None:
                t.record_stream(self._comm_stream)
        for t in outputs:
            if t is not None:
                t.record_stream(self._comm_stream)
                if allocate_on_comm_stream:
                    t.record_stream(compute)

    # Operations -----------------------------------------------------------

    def get_dispatch_layout(self, topk_idx, num_experts: int, previous_event: Optional[EventOverlap] = None,
                            async_finish: bool = False, allocate_on_comm_stream: bool = False):
        engine = self._engine
        if engine is not None:
            if allocate_on_comm_stream:
                _checks.order_flags(previous_event, async_finish, allocate_on_comm_stream)
            per_rank, per_node, per_expert, in_rank, event, _ = engine.layout(
                topk_idx, num_experts, _event_ptr(previous_event), async_finish, allocate_on_comm_stream, False)
            return per_rank, per_node, per_expert, in_rank, _event(event)
        _checks.layout(topk_idx, num_experts)
        _checks.order_flags(previous_event, async_finish, allocate_on_comm_stream)
        stream = _current_stream()
        order = self._engine_order(previous_event, async_finish, stream)
        out = _native.LayoutOut()
        lib = self._lib
        lib.check(lib.layout(self._live(), _byref(_checks.describe(topk_idx, "topk_idx")), num_experts,
                             _byref(order), _byref(out)))
        (per_rank, per_node, per_expert, in_rank), event = self._outputs(
            (out.num_tokens_per_rank, out.num_tokens_per_rdma_rank, out.num_tokens_per_expert,
             out.is_token_in_rank), stream, async_finish, allocate_on_comm_stream, out.event)
        self._record(async_finish, allocate_on_comm_stream, (topk_idx,), (per_rank, per_node, per_expert, in_rank))
        return per_rank, per_node, per_expert, in_rank, EventOverlap(event)

    def _layout_and_copy(self, topk_idx, num_experts: int):
        """get_dispatch_layout (no event, current stream) plus a copy of
        topk_idx (for ElasticBuffer's handle): the extension's layout kernel
        writes the copy as it reads topk_idx, so the copy costs no launch."""
        engine = self._engine
        if engine is not None:
            per_rank, per_node, per_expert, in_rank, _, copy = engine.layout(topk_idx, num_experts, 0, False, False,
                                                                             True)
            return per_rank, per_node, per_expert, in_rank, copy
        per_rank, per_node, per_expert, in_rank, _ = self.get_dispatch_layout(topk_idx, num_experts)
        return per_rank, per_node, per_expert, in_rank, topk_idx.clone()

    # ElasticBuffer's per-call entries: what its own checks proved is not
    # walked again, the extension is called directly, no event is made (the
    # current stream, no previous event). Each falls back to the public
    # method where the extension is not used or a check of V1's applies.

    def _cached_recv_x(self, x, handle, config: Config):
        """A BF16 cached dispatch's recv_x."""
        engine = self._engine
        if engine is None or self.num_nodes > 1 or config.num_sms % 2 != 0:
            return self.dispatch(x, handle=handle, config=config)[0]
        return engine.dispatch(x, None, _native_handle(handle).ptr, None, None, None, None, None, 1, 0,
                               config.num_sms, config.num_warps, config.nvl_chunk, 0, False, False)[0]

    def _dispatch_plain(self, x, x_scales, per_rank, per_node, in_rank, per_expert, topk_idx, topk_weights,
                        expert_alignment: int, num_worst_tokens: int, config: Config):
        """A non-cached dispatch: dispatch's result (its event unasked for)."""
        if self._engine is None or self.num_nodes > 1:
            return self.dispatch(x if x_scales is None else (x, x_scales), num_tokens_per_rank=per_rank,
                                 num_tokens_per_rdma_rank=per_node, is_token_in_rank=in_rank,
                                 num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights,
                                 expert_alignment=expert_alignment, num_worst_tokens=num_worst_tokens, config=config)
        return self._dispatch_fast(False, x, x_scales, None, None, per_rank, None, in_rank, per_expert, topk_idx,
                                   topk_weights, expert_alignment, num_worst_tokens, config, None, False, False)

    def _layout_dispatch(self, x, x_scales, topk_idx, topk_weights, num_experts: int, expert_alignment: int,
                         num_worst_tokens: int, config: Config, copy_topk: bool):
        """get_dispatch_layout then a non-cached dispatch, in one step into
        the extension where it serves: (recv_x, recv_topk_idx,
        recv_topk_weights, counts, handle, the layout's copy of topk_idx or
        None)."""
        engine = self._engine
        if engine is None or self.num_nodes > 1 or config.num_sms % 2 != 0:
            return layout_then_dispatch(self, x, x_scales, topk_idx, topk_weights, num_experts, expert_alignment,
                                        num_worst_tokens, config, copy_topk)
        (recv_x, recv_scales, recv_topk, recv_weights, recv_src, prefix, counts, new_handle, rows, _, in_rank,
         copy) = engine.layout_dispatch(x, x_scales, topk_idx, topk_weights, num_experts, expert_alignment,
                                        num_worst_tokens, config.num_sms, config.num_warps, config.nvl_chunk,
                                        copy_topk)
        handle = DispatchHandle((prefix, None, None, recv_src, in_rank, None),
                                _NativeHandle(self._lib, new_handle, rows))
        return (recv_x, recv_scales) if x_scales is not None else recv_x, recv_topk, recv_weights, counts, handle, copy

    def _combine_plain(self, x, handle, topk_weights, bias, config: Config):
        """combine's (combined_x, combined_topk_weights)."""
        engine = self._engine
        if engine is None or self.num_nodes > 1 or config.num_sms % 2 != 0:
            return self.combine(x, handle, topk_weights=topk_weights, bias=bias, config=config)[:2]
        b0, b1 = (None, None) if bias is None else Buffer._unpack_bias(bias)
        return engine.combine(x, topk_weights, _native_handle(handle).ptr, b0, b1, config.num_sms, config.num_warps,
                              config.nvl_chunk, 0, False, False)[:2]

    def dispatch(self, x, handle: Optional[Tuple] = None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None, topk_weights=None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Optional[Config] = None,
                 previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False):
        if self.num_nodes > 1:
            return self.internode_dispatch(x, handle, num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank,
                                           num_tokens_per_expert, topk_idx, topk_weights, expert_alignment,
                                           num_worst_tokens, config, previous_event, async_finish,
                                           allocate_on_comm_stream)
        return self._dispatch(False, x, handle, num_tokens_per_rank, None, is_token_in_rank, num_tokens_per_expert,
                              topk_idx, topk_weights, expert_alignment, num_worst_tokens, config, previous_event,
                              async_finish, allocate_on_comm_stream)

    def internode_dispatch(self, x, handle: Optional[Tuple] = None, num_tokens_per_rank=None,
                           num_tokens_per_rdma_rank=None, is_token_in_rank=None, num_tokens_per_expert=None,
                           topk_idx=None, topk_weights=None, expert_alignment: int = 1, num_worst_tokens: int = 0,
                           config: Optional[Config] = None, previous_event: Optional[EventOverlap] = None,
                           async_finish: bool = False, allocate_on_comm_stream: bool = False):
        require(self.num_nodes > 1, "internode_dispatch needs a Buffer spanning several nodes")
        return self._dispatch(True, x, handle, num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank,
                              num_tokens_per_expert, topk_idx, topk_weights, expert_alignment, num_worst_tokens,
                              config, previous_event, async_finish, allocate_on_comm_stream)

    def _dispatch(self, internode: bool, x, handle, num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank,
                  num_tokens_per_expert, topk_idx, topk_weights, expert_alignment: int, num_worst_tokens: int,
                  config: Optional[Config], previous_event, async_finish: bool, allocate_on_comm_stream: bool):
        config = self._default_config(_DISPATCH_CONFIGS) if config is None else config
        x, x_scales = x if isinstance(x, tuple) else (x, None)
        cached = handle is not None
        native = _native_handle(handle) if cached else None
        if self._engine is not None:
            return self._dispatch_fast(internode, x, x_scales, native, handle, num_tokens_per_rank,
                                       num_tokens_per_rdma_rank, is_token_in_rank, num_tokens_per_expert, topk_idx,
                                       topk_weights, expert_alignment, num_worst_tokens, config, previous_event,
                                       async_finish, allocate_on_comm_stream)
        if cached:
            is_token_in_rank = handle[0] if internode else handle[4]
        _checks.dispatch(x, x_scales, cached, num_tokens_per_rank, is_token_in_rank, num_tokens_per_expert,
                         topk_idx, topk_weights, self.group_size, expert_alignment, num_worst_tokens)
        if internode and not cached and num_tokens_per_rdma_rank is not None:
            _checks.vector(num_tokens_per_rdma_rank, "num_tokens_per_rdma_rank", "torch.int32")
            require(num_tokens_per_rdma_rank.size(0) == self.num_nodes,
                    f"num_tokens_per_rdma_rank must have {self.num_nodes} entries (one per node)")
        _checks.config(config, "dispatch")
        _checks.order_flags(previous_event, async_finish, allocate_on_comm_stream)
        describe = _checks.describe
        stream = _current_stream()
        args = _native.DispatchArgs()
        args.x = describe(x, "x")
        if x_scales is not None:
            args.x_scales = describe(x_scales, "x_scales")
        if cached:
            args.handle = native.ptr
        else:
            args.num_tokens_per_rank = describe(num_tokens_per_rank, "num_tokens_per_rank")
            args.is_token_in_rank = describe(is_token_in_rank, "is_token_in_rank")
            args.num_tokens_per_expert = describe(num_tokens_per_expert, "num_tokens_per_expert")
            if topk_idx is not None:
                args.topk_idx = describe(topk_idx, "topk_idx")
                args.topk_weights = describe(topk_weights, "topk_weights")
        args.expert_alignment = expert_alignment
        args.num_worst_tokens = num_worst_tokens
        args.config = config.native()
        args.order = self._engine_order(previous_event, async_finish, stream)
        out = _native.DispatchOut()
        lib = self._lib
        lib.check(lib.dispatch(self._live(), _byref(args), _byref(out)))

        if cached:
            if out.handle:
                lib.handle_release(out.handle)
            views = [out.recv_x, out.recv_x_scales]
        else:
            rows = out.num_recv_tokens if out.num_recv_tokens >= 0 else num_worst_tokens
            new_handle = _NativeHandle(lib, out.handle, rows)
            info = _native.HandleInfo()
            lib.check(lib.handle_info_get(out.handle, _byref(info)))
            views = [out.recv_x, out.recv_x_scales, out.recv_topk_idx, out.recv_topk_weights, out.recv_src_idx,
                     info.recv_gbl_rank_prefix_sum if internode else info.rank_prefix_matrix]
            counts = [out.num_recv_tokens_per_expert[i] for i in range(out.num_local_experts)]
        tensors, event = self._outputs(views, stream, async_finish, allocate_on_comm_stream, out.event)
        self._record(async_finish, allocate_on_comm_stream,
                     (x, x_scales, topk_idx, topk_weights, num_tokens_per_rank, is_token_in_rank,
                      num_tokens_per_expert), tensors)
        recv_x = (tensors[0], tensors[1]) if x_scales is not None else tensors[0]
        if cached:
            return recv_x, None, None, None, None, EventOverlap(event)
        if topk_idx is None:
            tensors[2] = tensors[3] = None
        if internode:
            items = (is_token_in_rank, None, None, None, None, None, tensors[5], None, None, None)
        else:
            prefix = tensors[5].view(self.group_size, self.group_size) if tensors[5] is not None else None
            items = (prefix, None, None, tensors[4], is_token_in_rank, None)
        return recv_x, tensors[2], tensors[3], counts, DispatchHandle(items, new_handle), EventOverlap(event)

    def _dispatch_fast(self, internode: bool, x, x_scales, native, handle, num_tokens_per_rank,
                       num_tokens_per_rdma_rank, is_token_in_rank, num_tokens_per_expert, topk_idx, topk_weights,
                       expert_alignment: int, num_worst_tokens: int, config: Config, previous_event,
                       async_finish: bool, allocate_on_comm_stream: bool):
        """The extension's dispatch: what the engine and the extension check
        is not checked again here."""
        if config.num_sms % 2 != 0:
            _checks.config(config, "dispatch")
        if allocate_on_comm_stream:
            _checks.order_flags(previous_event, async_finish, allocate_on_comm_stream)
        cached = native is not None
        if cached:
            is_token_in_rank = handle[0] if internode else handle[4]
        elif internode and num_tokens_per_rdma_rank is not None:
            _checks.vector(num_tokens_per_rdma_rank, "num_tokens_per_rdma_rank", "torch.int32")
            require(num_tokens_per_rdma_rank.size(0) == self.num_nodes,
                    f"num_tokens_per_rdma_rank must have {self.num_nodes} entries (one per node)")
        (recv_x, recv_scales, recv_topk, recv_weights, recv_src, prefix, counts, new_handle, rows,
         event) = self._engine.dispatch(
            x, x_scales, native.ptr if cached else 0, num_tokens_per_rank, is_token_in_rank,
            num_tokens_per_expert, topk_idx, topk_weights, expert_alignment, num_worst_tokens, config.num_sms,
            config.num_warps, config.nvl_chunk, _event_ptr(previous_event), async_finish, allocate_on_comm_stream)
        recv = (recv_x, recv_scales) if x_scales is not None else recv_x
        if cached:
            return recv, None, None, None, None, _event(event)
        native_handle = _NativeHandle(self._lib, new_handle, rows)
        if internode:
            items = (is_token_in_rank, None, None, None, None, None, prefix, None, None, None)
        else:
            items = (prefix, None, None, recv_src, is_token_in_rank, None)
        return recv, recv_topk, recv_weights, counts, DispatchHandle(items, native_handle), _event(event)

    def combine(self, x, handle: Tuple, topk_weights=None, bias=None, config: Optional[Config] = None,
                previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False):
        if self.num_nodes > 1:
            return self.internode_combine(x, handle, topk_weights, bias, config, previous_event, async_finish,
                                          allocate_on_comm_stream)
        return self._combine(x, handle, topk_weights, Buffer._unpack_bias(bias), config, previous_event,
                             async_finish, allocate_on_comm_stream)

    def internode_combine(self, x, handle: Tuple, topk_weights=None, bias=None, config: Optional[Config] = None,
                          previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                          allocate_on_comm_stream: bool = False):
        require(self.num_nodes > 1, "internode_combine needs a Buffer spanning several nodes")
        return self._combine(x, handle, topk_weights, Buffer._unpack_bias(bias), config, previous_event,
                             async_finish, allocate_on_comm_stream)

    def _combine(self, x, handle, topk_weights, biases, config: Optional[Config], previous_event,
                 async_finish: bool, allocate_on_comm_stream: bool):
        config = self._default_config(_COMBINE_CONFIGS) if config is None else config
        native = _native_handle(handle)
        engine = self._engine
        if engine is not None:
            if config.num_sms % 2 != 0:
                _checks.config(config, "combine")
            if allocate_on_comm_stream:
                _checks.order_flags(previous_event, async_finish, allocate_on_comm_stream)
            combined_x, combined_w, event = engine.combine(
                x, topk_weights, native.ptr, biases[0], biases[1], config.num_sms, config.num_warps,
                config.nvl_chunk, _event_ptr(previous_event), async_finish, allocate_on_comm_stream)
            return combined_x, combined_w, _event(event)
        _checks.combine(x, topk_weights, native.rows)
        for i, b in enumerate(biases):
            if b is not None:
                _checks.matrix(b, f"bias[{i}]", "torch.bfloat16")
        _checks.config(config, "combine")
        _checks.order_flags(previous_event, async_finish, allocate_on_comm_stream)
        stream = _current_stream()
        args = _native.CombineArgs()
        args.x = _checks.describe(x, "x")
        if topk_weights is not None:
            args.topk_weights = _checks.describe(topk_weights, "topk_weights")
        for i, b in enumerate(biases):
            args.bias[i] = _checks.describe(b, f"bias[{i}]")
        args.handle = native.ptr
        args.config = config.native()
        args.order = self._engine_order(previous_event, async_finish, stream)
        out = _native.CombineOut()
        self._lib.check(self._lib.combine(self._live(), _byref(args), _byref(out)))
        (combined_x, combined_w), event = self._outputs(
            (out.combined_x, out.combined_topk_weights), stream, async_finish, allocate_on_comm_stream, out.event)
        self._record(async_finish, allocate_on_comm_stream, (x, topk_weights) + tuple(biases),
                     (combined_x, combined_w))
        return combined_x, combined_w, EventOverlap(event)

    # Low-latency mode -----------------------------------------------------

    @staticmethod
    def _ll_order(async_finish: bool) -> _native.Order:
        return _native.Order(_current_stream(), None, int(async_finish), int(async_finish))

    def _ll_hook(self, ptr, keep):
        lib = self._lib
        return _Hook(ptr, keep, (lambda p: lib.check(lib.hook_call(p)), lib.hook_release)) if ptr else None

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank: int, num_experts: int,
                             cumulative_local_expert_recv_stats=None, dispatch_wait_recv_cost_stats=None,
                             use_fp8: bool = True, round_scale: bool = False, use_ue8m0: bool = False,
                             async_finish: bool = False, return_recv_hook: bool = False):
        """DeepEP's low_latency_dispatch. recv_x, its scales, recv_count and
        the handle's tensors are views into the Buffer's low-latency region,
        valid until the low-latency call two calls later (DeepEP's double
        buffer); clone what must live longer."""
        if not self.low_latency_mode:
            require(False, "low_latency_dispatch needs a Buffer made with low_latency_mode=True")
        engine = self._engine
        if engine is not None:
            # The whole result, hook included, is made by the extension.
            return engine.low_latency_dispatch(
                x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts, cumulative_local_expert_recv_stats,
                dispatch_wait_recv_cost_stats, use_fp8, round_scale, use_ue8m0, async_finish, return_recv_hook,
                self.low_latency_num_sms)
        _checks.low_latency_dispatch(x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts, async_finish,
                                     return_recv_hook)
        describe = _checks.describe
        order = self._ll_order(async_finish)
        args = _native.LLDispatchArgs()
        args.x = describe(x, "x")
        args.topk_idx = describe(topk_idx, "topk_idx")
        args.num_max_dispatch_tokens_per_rank = num_max_dispatch_tokens_per_rank
        args.num_experts = num_experts
        args.use_fp8, args.round_scale, args.use_ue8m0 = int(use_fp8), int(round_scale), int(use_ue8m0)
        args.cumulative_local_expert_recv_stats = describe(cumulative_local_expert_recv_stats,
                                                           "cumulative_local_expert_recv_stats")
        args.dispatch_wait_recv_cost_stats = describe(dispatch_wait_recv_cost_stats, "dispatch_wait_recv_cost_stats")
        args.return_recv_hook = int(return_recv_hook)
        args.num_sms = self.low_latency_num_sms
        args.order = order
        out = _native.LLDispatchOut()
        self._lib.check(self._lib.ll_dispatch(self._live(), _byref(args), _byref(out)))
        recv_x = self._as_view(out.recv_x)
        if use_fp8:
            recv_x = (recv_x, self._as_view(out.recv_x_scales))
        native = _native.LLHandle.from_buffer_copy(out.handle)
        handle = LowLatencyHandle((self._as_view(native.src_info), self._as_view(native.layout_range),
                                   num_max_dispatch_tokens_per_rank, x.size(1), num_experts))
        handle.native = native
        hook = self._ll_hook(out.hook, (x, topk_idx, cumulative_local_expert_recv_stats,
                                        dispatch_wait_recv_cost_stats))
        event = EventHandle(out.event) if out.event else None
        return recv_x, self._as_view(out.recv_count), handle, EventOverlap(event), hook

    def low_latency_combine(self, x, topk_idx, topk_weights, handle: tuple, use_logfmt: bool = False,
                            zero_copy: bool = False, async_finish: bool = False, return_recv_hook: bool = False,
                            out=None, combine_wait_recv_cost_stats=None):
        """DeepEP's low_latency_combine; the result goes to `out` (a new
        tensor when not given)."""
        if not self.low_latency_mode:
            require(False, "low_latency_combine needs a Buffer made with low_latency_mode=True")
        if use_logfmt:
            raise _not_implemented("the LogFMT combine (use_logfmt=True)")
        engine = self._engine
        if engine is not None:
            # The extension checks async_finish against return_recv_hook.
            return engine.low_latency_combine(
                None if zero_copy else x, topk_idx, topk_weights, handle, zero_copy, async_finish, return_recv_hook,
                out, combine_wait_recv_cost_stats, self.low_latency_num_sms)
        require(not (async_finish and return_recv_hook), "async_finish and return_recv_hook exclude each other")
        native = getattr(handle, "native", None)
        if not isinstance(native, _native.LLHandle):
            raise TypeError("the handle must come from epkit.deep_ep.Buffer.low_latency_dispatch")
        _checks.matrix(topk_idx, "topk_idx", "torch.int64")
        _checks.matrix(topk_weights, "topk_weights", "torch.float32")
        torch = self._torch
        if out is None:
            out = torch.empty((topk_idx.size(0), native.hidden), dtype=torch.bfloat16, device=self._cuda)
        describe = _checks.describe
        order = self._ll_order(async_finish)
        args = _native.LLCombineArgs()
        if not zero_copy:
            args.x = describe(x, "x")
        args.topk_idx = describe(topk_idx, "topk_idx")
        args.topk_weights = describe(topk_weights, "topk_weights")
        args.handle = native
        args.zero_copy, args.return_recv_hook = int(zero_copy), int(return_recv_hook)
        args.out = describe(out, "out")
        args.combine_wait_recv_cost_stats = describe(combine_wait_recv_cost_stats, "combine_wait_recv_cost_stats")
        args.num_sms = self.low_latency_num_sms
        args.order = order
        result = _native.LLCombineOut()
        self._lib.check(self._lib.ll_combine(self._live(), _byref(args), _byref(result)))
        hook = self._ll_hook(result.hook, (x, topk_idx, topk_weights, out, combine_wait_recv_cost_stats))
        event = EventHandle(result.event) if result.event else None
        return out, EventOverlap(event), hook

    def get_next_low_latency_combine_buffer(self, handle: tuple):
        native = getattr(handle, "native", None)
        if isinstance(native, bytes):
            native = _native.LLHandle.from_buffer_copy(native)
        if not isinstance(native, _native.LLHandle):
            raise TypeError("the handle must come from epkit.deep_ep.Buffer.low_latency_dispatch")
        view = _native.Tensor()
        self._lib.check(self._lib.ll_next_combine_buffer(self._live(), _byref(native), _byref(view)))
        return self._as_view(view)

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        require(self.low_latency_mode, "clean_low_latency_buffer needs a Buffer made with low_latency_mode=True")
        self._lib.check(self._lib.ll_clean(self._live(), num_max_dispatch_tokens_per_rank, hidden, num_experts))

    # Not in epkit's engine yet -------------------------------------------

    def low_latency_update_mask_buffer(self, *args, **kwargs):
        raise _not_implemented("shrink mode")

    def low_latency_query_mask_buffer(self, *args, **kwargs):
        raise _not_implemented("shrink mode")

    def low_latency_clean_mask_buffer(self, *args, **kwargs):
        raise _not_implemented("shrink mode")


class LowLatencyHandle(tuple):
    """DeepEP's low-latency handle (src_info, layout_range,
    num_max_dispatch_tokens_per_rank, hidden, num_experts) plus the engine's
    (`native`: the C ABI's struct, or its bytes on the extension's path).
    Made as LowLatencyHandle(items) with `native` set after: no Python
    frame per call."""

    native: "_native.LLHandle"


class _Hook:
    """The ctypes path's receive hook (the extension's is epkit._C.Hook):
    launches the receive half once; keeps the call's tensors alive until
    then. `calls` is (call, release) over the C ABI."""

    __slots__ = ("_ptr", "_keep", "_calls")

    def __init__(self, ptr: int, keep, calls):
        self._ptr, self._keep, self._calls = ptr, keep, calls

    def __call__(self):
        require(self._ptr is not None, "the hook was called already")
        ptr, self._ptr = self._ptr, None
        call, release = self._calls
        try:
            call(ptr)
        finally:
            release(ptr)
            self._keep = None

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            try:
                self._calls[1](ptr)
            except Exception:  # interpreter shutdown
                pass


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False

