"""DeepEP V2's ElasticBuffer (deep_ep at commit dd758ca) over epkit's engine.

Built on the V1 `Buffer`'s public methods only (get_dispatch_layout,
dispatch, combine): a V2 dispatch is a layout pass plus a V1 dispatch, with
the expanded layout, the prefix sums and the source metadata derived from
the V1 outputs by tensor operations that never synchronise with the host
(so `do_cpu_sync=False` calls can be captured in a CUDA graph).

V2's combine adds each token's contributions in a fixed order that is not
V1's (rank by rank): the biases first, then the partial sum of every
destination rank in the order of the last top-k slot it holds (and across
nodes, in hybrid mode, the ranks of a node first, rounded to BF16, then the
nodes in that order). The engine sums in rank order, which gives other bits
as soon as a token has a bias or three or more destinations. So such a
combine sends each destination's partial sum in its own column block (a
combine `width` times as wide; every block then has one contributor, so
the engine's sum copies it exactly) and adds the blocks in V2's order on
the token's own rank. `exact_combine_order=False` (epkit-only) takes the
engine's order instead: one block, other rounding.

Every V2 call runs in stream order on the current stream: the current
stream waits for the communication, and `async_with_compute_stream=True`
returns an event that is already complete when the current stream reaches
it (results are right; compute does not overlap the communication).
"""

import os
import socket
from typing import Any, Callable, List, Optional, Tuple

from ._checks import require
from ._events import Config, EventHandle, EventOverlap
from .buffer import Buffer, output_pool_bytes
from .buffer import _torch as buffer_torch

#: DeepEP V2's buffer sizes are multiples of this (2 MiB).
BUFFER_ALIGNMENT = 2 << 20
#: The most ranks one epkit node (NVLink domain) holds.
MAX_RANKS_PER_NODE = 8
#: V2's scale factors are packed to 16 bytes in its TMA-aligned layout.
_TMA_ALIGNED_SF_PACKS = 4
#: Columns of the side payload a cached dispatch carries (source token
#: indices, top-k weights): 128 BF16 = 64 int32.
_PAYLOAD_COLUMNS = 128


def _torch():
    return buffer_torch("epkit.deep_ep.ElasticBuffer")


def _not_implemented(feature: str):
    return NotImplementedError(f"epkit.deep_ep.ElasticBuffer: {feature} is not implemented by epkit's engine")


def _unsupported(feature: str, static: bool = False):
    """A V2 method epkit's engine has no counterpart for."""
    def method(*args, **kwargs):
        raise _not_implemented(feature)
    return staticmethod(method) if static else method


def align(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def value_or(value, default):
    return default if value is None else value


# Argument checks (pure Python: a tensor is anything with dim(), size(),
# is_contiguous(), element_size() and a dtype whose str() is PyTorch's) ----


def _is_tensor_like(t) -> bool:
    return t is not None and hasattr(t, "dim") and hasattr(t, "size")


def check_constructor(num_ranks: int, num_bytes: Optional[int], num_cpu_bytes: int, num_max_tokens_per_rank: int,
                      hidden: int, num_topk: int) -> None:
    """V2's constructor asserts, and what epkit's engine does not do."""
    if num_cpu_bytes > 0:
        assert num_bytes is not None
        raise _not_implemented("host memory in the buffer (num_cpu_bytes > 0, used by Engram)")
    require(num_cpu_bytes == 0, f"num_cpu_bytes must be >= 0, not {num_cpu_bytes}")
    if num_bytes is None:
        require(num_max_tokens_per_rank > 0 and hidden > 0,
                "ElasticBuffer needs num_bytes, or num_max_tokens_per_rank > 0 and hidden > 0")
    else:
        require(num_bytes > 0 and num_bytes % BUFFER_ALIGNMENT == 0,
                f"num_bytes must be a positive multiple of {BUFFER_ALIGNMENT} (2 MiB), not {num_bytes}")
    require(num_max_tokens_per_rank >= 0 and hidden >= 0 and num_topk >= 0,
            "num_max_tokens_per_rank, hidden and num_topk must be >= 0")
    if hidden > 0 and hidden % 128 != 0:
        raise _not_implemented(f"hidden {hidden}, not a multiple of 128")
    require(num_ranks >= 1, "the group has no ranks")


#: V2's most SMs of a hybrid (scale-out) dispatch (kNumMaxSMs).
MAX_HYBRID_SMS = 160


def check_stream_order(previous_event, allocate_on_comm_stream: bool) -> None:
    """V2 (stream_control_prologue): with previous_event, the compute
    kernels are queued first, so outputs are allocated on the
    communication stream."""
    require(previous_event is None or allocate_on_comm_stream,
            "previous_event needs allocate_on_comm_stream=True")


def check_torch_deterministic(torch) -> None:
    """V2's check_torch_deterministic: torch.empty's fill kernel (with
    deterministic algorithms and fill_uninitialized_memory both on) may run
    beside the communication writing the same outputs."""
    fill = getattr(getattr(torch.utils, "deterministic", None), "fill_uninitialized_memory", False)
    require(not (torch.are_deterministic_algorithms_enabled() and fill),
            "torch's deterministic algorithms and torch.utils.deterministic.fill_uninitialized_memory are both on "
            "(DeepEP V2 refuses this too: the fill of new outputs may race with the communication)")


def check_dispatch(x, sf, topk_idx, topk_weights, cumulative_local_expert_recv_stats, num_experts: Optional[int],
                   num_ranks: int, num_max_tokens_per_rank: int, expert_alignment: int, num_sms: int, num_qps: int,
                   num_allocated_qps: int, do_expand: bool, do_zero_padding: bool, previous_event=None,
                   allocate_on_comm_stream: bool = False, max_num_sms: Optional[int] = None) -> None:
    """V2's dispatch asserts (its Python and its C++ host checks).
    max_num_sms: the GPU's SMs (and V2's cap in hybrid mode), None: unknown."""
    assert num_qps <= num_allocated_qps, 'Allocated QPs are not enough'
    require(num_sms > 0, f"num_sms must be positive, not {num_sms}")
    require(max_num_sms is None or num_sms <= max_num_sms, f"num_sms {num_sms} is more than {max_num_sms} (the GPU's "
            f"SMs, at most {MAX_HYBRID_SMS} in hybrid mode)")
    check_stream_order(previous_event, allocate_on_comm_stream)
    require(not do_zero_padding or do_expand, "do_zero_padding needs do_expand")
    require(num_experts is not None and num_experts > 0, "dispatch needs num_experts (or a handle)")
    require(num_experts % num_ranks == 0, f"{num_experts} experts do not split over {num_ranks} ranks")
    require(expert_alignment >= 1, f"expert_alignment must be >= 1, not {expert_alignment}")
    require(_is_tensor_like(x) and x.dim() == 2 and x.is_contiguous(), "x must be a contiguous 2-D tensor")
    require((x.size(1) * x.element_size()) % 16 == 0, "x rows must be a multiple of 16 bytes")
    num_tokens, hidden = x.size(0), x.size(1)
    require(num_tokens <= num_max_tokens_per_rank,
            f"{num_tokens} tokens, more than num_max_tokens_per_rank = {num_max_tokens_per_rank}")
    if sf is not None:
        require(str(x.dtype) == "torch.float8_e4m3fn",
                f"scale factors go with FP8 (torch.float8_e4m3fn) x, not {x.dtype}")
        require(sf.dim() == 2 and sf.size(0) == num_tokens, "the scale factors need one row per token of x")
        require(sf.element_size() == 4, "scale factors are 4-byte packs")
        if str(sf.dtype) != "torch.float32":
            raise _not_implemented(f"scale factors of {sf.dtype} (packed UE8M0); the engine takes torch.float32")
        if hidden % 128 != 0 or sf.size(1) * 128 != hidden:
            raise _not_implemented("FP8 scale factors other than one per 128 channels")
    else:
        require(str(x.dtype) == "torch.bfloat16", f"x must be torch.bfloat16, or FP8 with scale factors, not {x.dtype}")
        if hidden % 128 != 0:
            raise _not_implemented(f"hidden {hidden}, not a multiple of 128")
    require(_is_tensor_like(topk_idx) and topk_idx.dim() == 2 and topk_idx.is_contiguous(),
            "topk_idx must be a contiguous 2-D tensor")
    require(topk_idx.size(0) == num_tokens, "topk_idx needs one row per token of x")
    require(str(topk_idx.dtype) == "torch.int64", f"topk_idx must be topk_idx_t (torch.int64), not {topk_idx.dtype}")
    num_topk = topk_idx.size(1)
    require(1 <= num_topk <= _PAYLOAD_COLUMNS // 2 - 1, f"num_topk {num_topk} must be 1 to {_PAYLOAD_COLUMNS // 2 - 1}")
    if topk_weights is not None:
        require(topk_weights.dim() == 2 and topk_weights.is_contiguous(),
                "topk_weights must be a contiguous 2-D tensor")
        require(tuple(topk_weights.size()) == (num_tokens, num_topk), "topk_weights must have topk_idx's shape")
        require(str(topk_weights.dtype) == "torch.float32",
                f"topk_weights must be torch.float32, not {topk_weights.dtype}")
    if cumulative_local_expert_recv_stats is not None:
        s = cumulative_local_expert_recv_stats
        require(s.dim() == 1 and s.is_contiguous() and str(s.dtype) == "torch.int32",
                "cumulative_local_expert_recv_stats must be a contiguous torch.int32 vector")
        require(s.size(0) == num_experts // num_ranks,
                f"cumulative_local_expert_recv_stats needs {num_experts // num_ranks} entries (local experts)")


def check_cached(handle, topk_idx, do_cpu_sync, num_experts, expert_alignment, num_max_tokens_per_rank,
                 do_expand: bool) -> Tuple[int, int, int]:
    """V2's cached-dispatch asserts; returns (num_experts, expert_alignment,
    num_max_tokens_per_rank) filled from the handle."""
    assert topk_idx is None
    assert do_cpu_sync is None or not do_cpu_sync, 'Cannot do CPU sync with cached handle'
    num_max_tokens_per_rank = value_or(num_max_tokens_per_rank, handle.num_max_tokens_per_rank)
    num_experts = value_or(num_experts, handle.num_experts)
    expert_alignment = value_or(expert_alignment, handle.expert_alignment)
    assert (num_experts, expert_alignment, num_max_tokens_per_rank) == \
           (handle.num_experts, handle.expert_alignment, handle.num_max_tokens_per_rank)
    require(do_expand == handle.do_expand,
            f"a cached dispatch keeps the handle's layout: do_expand must be {handle.do_expand}")
    return num_experts, expert_alignment, num_max_tokens_per_rank


def unpack_bias(bias) -> Tuple[Any, Any]:
    if bias is None:
        return None, None
    if isinstance(bias, tuple):
        assert len(bias) == 2
        return bias
    return bias, None


def check_combine(x, topk_weights, biases, handle, num_qps: int, num_allocated_qps: int,
                  allow_multiple_reduction: bool, num_sms: int = 1, previous_event=None,
                  allocate_on_comm_stream: bool = False) -> None:
    """V2's combine asserts."""
    assert num_qps <= num_allocated_qps, 'Allocated QPs are not enough'
    require(isinstance(handle, EPHandle) and getattr(handle, "_v1", None) is not None,
            "the handle must come from epkit.deep_ep.ElasticBuffer.dispatch")
    require(num_sms > 0, f"num_sms must be positive, not {num_sms}")
    check_stream_order(previous_event, allocate_on_comm_stream)
    require(_is_tensor_like(x) and x.dim() == 2 and x.is_contiguous(), "x must be a contiguous 2-D tensor")
    require(str(x.dtype) == "torch.bfloat16", f"combine x must be torch.bfloat16, not {x.dtype}")
    require((x.size(1) * x.element_size()) % 16 == 0, "x rows must be a multiple of 16 bytes")
    if handle.do_expand:
        # V2 reads the expanded rows the handle names: x may have more
        # (the weights then have as many).
        rows = handle._expanded_rows
        require(x.size(0) >= rows, f"combine x must have the dispatch's {rows} expanded rows, not {x.size(0)}")
    else:
        rows = handle._rows
        require(x.size(0) == rows, f"combine x must have the dispatch's {rows} received rows, not {x.size(0)}")
    if topk_weights is not None:
        require(str(topk_weights.dtype) == "torch.float32",
                f"topk_weights must be torch.float32, not {topk_weights.dtype}")
        require(topk_weights.is_contiguous(), "topk_weights must be contiguous")
        if handle.do_expand:
            # NOTES (V2's test): expand mode needs allow_multiple_reduction for weights.
            require(allow_multiple_reduction, "expand-mode combine with topk_weights needs allow_multiple_reduction")
            require(topk_weights.dim() == 1 and topk_weights.size(0) == x.size(0),
                    f"expand-mode topk_weights must be [{x.size(0)}] (one per row of x)")
        else:
            require(topk_weights.dim() == 2 and tuple(topk_weights.size()) == (rows, handle._num_topk),
                    f"topk_weights must be [{rows}, {handle._num_topk}]")
    num_tokens = handle.topk_idx.size(0)
    for i, b in enumerate(biases):
        if b is not None:
            require(b.dim() == 2 and b.is_contiguous() and str(b.dtype) == "torch.bfloat16",
                    f"bias[{i}] must be a contiguous torch.bfloat16 matrix")
            require(tuple(b.size()) == (num_tokens, x.size(1)), f"bias[{i}] must be [{num_tokens}, {x.size(1)}]")


# Sizes ------------------------------------------------------------------


def combine_width(num_ranks: int, max_topk: int, allow_multiple_reduction: bool, exact_combine_order: bool) -> int:
    """Column blocks of an exact-order combine: one per rank when there are
    no more ranks than top-k slots, else one per top-k slot (a rank's partial
    sum goes to its last slot). Without multiple reduction an expanded
    combine sends every slot on its own: one block per slot."""
    if not exact_combine_order:
        return 1
    if allow_multiple_reduction and num_ranks <= max_topk:
        return num_ranks
    return max_topk


def worst_case_rows(num_ranks: int, num_max_tokens_per_rank: int, num_topk: int, num_local_experts: int,
                    expert_alignment: int) -> Tuple[int, int]:
    """V2's worst-case received rows without a host sync: (tokens, expanded rows)."""
    tokens = num_ranks * num_max_tokens_per_rank
    expanded = tokens * min(num_topk, num_local_experts) + (expert_alignment - 1) * num_local_experts
    return tokens, align(expanded, expert_alignment)


def engine_bytes(num_ranks: int, ranks_per_node: int, num_max_tokens_per_rank: int, hidden: int,
                 num_topk: int) -> int:
    """The engine's memory per GPU for a Buffer of these sizes."""
    from .. import _native
    lib = _native.load()
    o = _native.Options()
    lib.check(lib.default_options(_native.ctypes.byref(o)))
    o.max_tokens, o.max_hidden, o.max_topk = num_max_tokens_per_rank, hidden, num_topk
    o.ranks_per_node = ranks_per_node if ranks_per_node < num_ranks else 0
    out = _native.ctypes.c_uint64()
    lib.check(lib.bytes_needed(_native.ctypes.byref(o), num_ranks, _native.ctypes.byref(out)))
    return int(out.value)


def runtime_buffer_args(num_ranks: int, num_bytes: Optional[int], num_max_tokens_per_rank: int, hidden: int,
                        width: int, topk: int, timeout_secs: int, ranks_per_node: int) -> dict:
    """The V1 Buffer under an ElasticBuffer: rows as wide as the exact-order
    combine's (width blocks of hidden); sized in tokens, it gets an output
    arena too, for one dispatch at V2's hidden (dispatch outputs are what the
    arena holds; without it they are copied out and combines staged)."""
    sized_in_tokens = num_max_tokens_per_rank > 0
    return dict(num_nvl_bytes=num_bytes or 0, explicitly_destroy=True,
                max_tokens=num_max_tokens_per_rank if sized_in_tokens else None,
                max_hidden=width * hidden, max_topk=topk, timeout_s=float(timeout_secs),
                ranks_per_node=ranks_per_node,
                output_pool_bytes=output_pool_bytes(num_ranks * num_max_tokens_per_rank, hidden, topk)
                if sized_in_tokens else None)


def find_ranks_per_node(group, explicit: Optional[int] = None) -> int:
    """Ranks per node (NVLink domain): `explicit`, else $EPKIT_RANKS_PER_NODE
    (how a test fakes nodes on one host), else the ranks sharing this host
    name (all-gathered through the group)."""
    size = group.size()
    if explicit is None:
        env = os.environ.get("EPKIT_RANKS_PER_NODE", "")
        if env:  # empty: unset
            require(env.isdigit() and 0 < int(env) <= 4096,
                    f"EPKIT_RANKS_PER_NODE must be a positive integer, not {env[:40]!r}")
            explicit = int(env)
    if explicit is None:
        import torch
        import torch.distributed as dist
        hosts: List[Optional[str]] = [None] * size
        # Outside inference mode: some PyTorch versions' object gathers
        # update their size tensors in place (V2's test builds under it).
        with torch.inference_mode(False):
            dist.all_gather_object(hosts, socket.gethostname(), group)
        explicit = hosts.count(hosts[0])
        blocks = [hosts[i:i + explicit] for i in range(0, size, explicit)]
        require(size % explicit == 0 and all(len(set(b)) == 1 for b in blocks) and
                len({b[0] for b in blocks}) == len(blocks),
                "the group's ranks are not whole nodes of consecutive ranks on one host each "
                "(pass ranks_per_node= or set EPKIT_RANKS_PER_NODE)")
    require(explicit >= 1 and size % explicit == 0, f"{size} ranks do not make whole nodes of {explicit} ranks")
    if explicit > MAX_RANKS_PER_NODE:
        raise _not_implemented(f"{explicit} ranks per node (at most {MAX_RANKS_PER_NODE})")
    return explicit


# Events ----------------------------------------------------------------


class ElasticEventOverlap(EventOverlap):
    """V2's EventOverlap: epkit's, plus a hook run after the wait and
    `release_handle` (`with event(release_handle=True):`)."""

    # Defaults on the class: a call without async_with_compute_stream
    # returns one made without __init__ (host cost, see _event_of).
    event: Optional[EventHandle] = None
    extra_tensors: Optional[Tuple[Any, ...]] = None
    _release_handle_by_call = False
    hook_after_wait: Optional[Callable] = None

    def __init__(self, event: Optional[EventHandle] = None, extra_tensors: Optional[Tuple[Any, ...]] = None) -> None:
        super().__init__(event, extra_tensors)

    def current_stream_wait(self, release_handle: bool = False) -> None:
        assert self.event is not None
        self.event.current_stream_wait()
        if self.hook_after_wait is not None:
            hook, self.hook_after_wait = self.hook_after_wait, None
            hook()
        if release_handle:
            self.event = None

    def register_hook_after_wait(self, hook_after_wait: Callable) -> None:
        assert self.hook_after_wait is None, "A hook is already registered on this `EventOverlap`"
        self.hook_after_wait = hook_after_wait

    def __call__(self, release_handle: bool = False) -> "ElasticEventOverlap":
        self._release_handle_by_call = release_handle
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if self.event is not None:
            self.current_stream_wait(release_handle=self._release_handle_by_call)
        self._release_handle_by_call = False


_new_object = object.__new__


def _event_of(async_with_compute_stream: bool) -> ElasticEventOverlap:
    """A V2 call's event: one recorded on the current stream, or none (made
    without __init__: the class's defaults are its fields)."""
    if async_with_compute_stream:
        return ElasticEventOverlap(EventHandle())
    return _new_object(ElasticEventOverlap)


# The handle --------------------------------------------------------------

#: Handle fields derived from the V1 outputs on first read (most callers
#: read none of them; each costs a few tensor operations).
_LAZY_FIELDS = ("psum_num_recv_tokens_per_scaleup_rank", "psum_num_recv_tokens_per_expert",
                "num_unaligned_recv_tokens_per_expert", "recv_src_metadata", "dst_buffer_slot_idx")


class EPHandle:
    """V2's dispatch handle (fields as at dd758ca).

    epkit's values: `recv_src_metadata` is int32 [num_recv_tokens, 2 + num_topk]:
    column 0 the source token's global index (source rank x
    num_max_tokens_per_rank + its index there), column 1 the source rank,
    columns 2.. in expand mode the expanded row of each top-k slot (-1: not
    here), -1 otherwise; rows past the received ones (no CPU sync) are -1.
    `dst_buffer_slot_idx` is int32 [num_tokens, num_topk]: the destination
    rank of each selection (-1: none); V2's destination buffer slots do not
    exist in epkit's engine. `token_metadata_at_forward` and
    `channel_linked_list` are None. `num_unaligned_recv_tokens_per_expert`
    is filled in both layouts. The tensor fields are made on first read,
    from the dispatch's outputs; a dispatch captured in a CUDA graph makes
    them in the call (a later read would give one replay's values only)."""

    # V2's fields that are None unless given, and epkit's state: class
    # defaults, so that a dispatch sets only what it has (host cost).
    # Assigning one sets the handle's own.
    token_metadata_at_forward = None
    channel_linked_list = None
    cached_recv_src_metadata_before_sort = None
    #: The V1 handle.
    _v1 = None
    #: What the lazy fields are derived from (_Routing).
    _routing = None
    #: A field maker that replaces _routing's (tests).
    _derive: Optional[Callable[[str], Any]] = None
    #: The _Plan of the buffer whose dispatch checked this handle's
    #: arguments: a cached dispatch or combine there checks only the new ones.
    _proof = None

    def __init__(self, do_expand: bool, num_experts: int, expert_alignment: int, num_max_tokens_per_rank: int,
                 num_sms: int, topk_idx, num_recv_tokens: int, num_expanded_tokens: int,
                 num_recv_tokens_per_expert_list: list, psum_num_recv_tokens_per_scaleup_rank=None,
                 psum_num_recv_tokens_per_expert=None, num_unaligned_recv_tokens_per_expert=None,
                 recv_src_metadata=None, dst_buffer_slot_idx=None, token_metadata_at_forward=None,
                 channel_linked_list=None):
        assert topk_idx is not None
        self.do_expand = do_expand
        self.num_experts = num_experts
        self.expert_alignment = expert_alignment
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        self.num_sms = num_sms
        self.topk_idx = topk_idx
        self.num_recv_tokens = num_recv_tokens
        self.num_expanded_tokens = num_expanded_tokens
        self.num_recv_tokens_per_expert_list = num_recv_tokens_per_expert_list
        for name, value in (("psum_num_recv_tokens_per_scaleup_rank", psum_num_recv_tokens_per_scaleup_rank),
                            ("psum_num_recv_tokens_per_expert", psum_num_recv_tokens_per_expert),
                            ("num_unaligned_recv_tokens_per_expert", num_unaligned_recv_tokens_per_expert),
                            ("recv_src_metadata", recv_src_metadata),
                            ("dst_buffer_slot_idx", dst_buffer_slot_idx),
                            ("token_metadata_at_forward", token_metadata_at_forward),
                            ("channel_linked_list", channel_linked_list)):
            if value is not None:
                setattr(self, name, value)
        # epkit's: the rows as dispatched (the public fields are assignable).
        self._rows = num_recv_tokens
        self._expanded_rows = num_expanded_tokens
        self._num_tokens, self._num_topk = topk_idx.size(0), topk_idx.size(1)

    def __getattr__(self, name: str):
        # Only reached for attributes not set yet: the lazy fields.
        if name == "num_expanded_tokens" or name == "_expanded_rows":
            routing = self._routing
            if routing is not None and routing.counts_list is not None:
                value = sum(routing.counts_list)
                self.__dict__.setdefault("num_expanded_tokens", value)
                self.__dict__.setdefault("_expanded_rows", value)
                return self.__dict__[name]
        elif name in _LAZY_FIELDS:
            derive, routing = self._derive, self._routing
            if derive is not None:
                value = derive(name)
            elif routing is not None:
                value = _derive_field(routing, name)
            else:
                return None
            self.__dict__[name] = value
            return value
        raise AttributeError(f"'EPHandle' object has no attribute {name!r}")

    def deterministic_sort(self, *args, **kwargs) -> None:
        """Nothing to do: epkit's engine receives rows in source order
        (source rank, then token), the same on every call."""
        return None


def _never() -> bool:
    return False


class _Plan:
    """What every call of one ElasticBuffer reads, made on its first call
    (host cost: no structure is rebuilt per call): its sizes, PyTorch's
    dtypes, the default SM and QP counts, the configs, and which combines
    the engine's own sum serves. Holds no reference to the buffer (handles
    keep it as their `_proof`, and a handle may outlive its buffer)."""

    __slots__ = ("torch", "bf16", "i64", "f32", "rank", "num_ranks", "num_scaleup_ranks", "single_node",
                 "max_tokens", "hidden", "max_topk", "num_allocated_qps", "max_num_sms", "sms_limit", "v1_num_sms",
                 "num_sms", "qps", "engine_sum", "capturing", "deterministic")

    def __init__(self, buffer: "ElasticBuffer"):
        torch = buffer._torch
        self.torch = torch
        self.bf16, self.i64, self.f32 = torch.bfloat16, torch.int64, torch.float32
        self.rank, self.num_ranks = buffer.rank_idx, buffer.num_ranks
        self.num_scaleup_ranks = buffer.num_scaleup_ranks
        self.single_node = buffer.num_rdma_ranks == 1
        self.max_tokens = buffer.runtime.max_tokens
        self.hidden = buffer._hidden
        self.max_topk = min(buffer._max_topk, _PAYLOAD_COLUMNS // 2 - 1)
        self.num_allocated_qps = buffer.num_allocated_qps
        # V2's SM limits of a dispatch: the GPU's (None: not known), and
        # kNumMaxSMs in hybrid mode.
        limits = [n for n in (getattr(buffer, "_device_sms", None),
                              MAX_HYBRID_SMS if buffer.num_scaleout_ranks > 1 else None) if n]
        self.max_num_sms = min(limits) if limits else None
        self.sms_limit = self.max_num_sms or 1 << 30
        self.v1_num_sms = Buffer.num_sms
        self.num_sms = buffer.get_theoretical_num_sms(0, 0)
        self.qps = {}  # num_sms -> get_theoretical_num_qps(num_sms)
        self.engine_sum = {}  # (num_topk, with bias) -> whether a plain combine is the engine's
        # Whether the current stream is capturing a CUDA graph (torch's
        # one C call; without CUDA: never).
        capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
        self.capturing = capturing if capturing is not None and torch.cuda.is_available() else _never
        # Whether torch's deterministic algorithms are on (one C call; V2
        # then checks fill_uninitialized_memory: check_torch_deterministic).
        self.deterministic = getattr(torch._C, "_get_deterministic_algorithms", None) or \
            torch.are_deterministic_algorithms_enabled


class _Routing:
    """What the handle's fields are derived from: the V1 outputs and sizes.
    The per-expert counts and the source prefix sum are made on first use
    (a plain dispatch needs neither: its host cost stays the V1 call's).

    Made by _routing(); the fields below are None until set."""

    #: V1's recv_src_idx (across nodes: the side dispatch's), the handle's
    #: topk_idx, and in expand mode each (row, slot)'s expanded row.
    recv_src_idx = topk_idx = slot = None
    #: V1's per-expert list (do_cpu_sync), for num_expanded_tokens.
    counts_list = None
    #: Made on first use: the source prefix sum, the counts and aligned counts.
    psum_src_ = counts_ = aligned_ = None

    def psum_src(self):
        """Inclusive prefix sum of the rows from each source rank (int32 [ranks])."""
        if self.psum_src_ is None:
            v = self.v1[0][:, self.plan.rank] if self.plan.single_node else self.v1[6]
            self.psum_src_ = v.contiguous().to(self.plan.torch.int32)
        return self.psum_src_

    def counts(self):
        """Rows per local expert (int32, on the device: no host sync), and
        those counts aligned to expert_alignment."""
        if self.counts_ is None:
            torch = self.plan.torch
            idx, n = self.recv_topk_idx, self.num_local_experts
            hit = idx >= 0
            counts = torch.zeros((n + 1,), dtype=torch.int32, device=idx.device)
            counts.scatter_add_(0, torch.where(hit, idx, n).flatten(), hit.flatten().to(torch.int32))
            self.counts_ = counts[:n]
            a = self.expert_alignment
            self.aligned_ = self.counts_ if a == 1 else (self.counts_ + (a - 1)) // a * a
        return self.counts_, self.aligned_


def _routing(plan: _Plan, v1, recv_topk_idx, rows: int, num_experts: int, expert_alignment: int,
             num_max_tokens_per_rank: int, do_expand: bool) -> _Routing:
    r = _new_object(_Routing)
    # Set at once (host cost).
    r.__dict__ = {"plan": plan, "v1": v1, "recv_topk_idx": recv_topk_idx, "rows": rows, "num_experts": num_experts,
                  "num_local_experts": num_experts // plan.num_ranks, "expert_alignment": expert_alignment,
                  "num_max_tokens_per_rank": num_max_tokens_per_rank, "do_expand": do_expand}
    return r


def _derive_field(r: _Routing, name: str):
    """A handle field, from the dispatch's outputs only (a handle may
    outlive its buffer)."""
    torch = r.plan.torch
    if name == "psum_num_recv_tokens_per_scaleup_rank":
        psum_src = r.psum_src()
        if r.plan.num_scaleup_ranks == r.plan.num_ranks:
            return psum_src
        per_src = torch.diff(psum_src, prepend=psum_src.new_zeros(1))
        per_scaleup = per_src.view(-1, r.plan.num_scaleup_ranks).sum(0)
        return torch.cumsum(per_scaleup, 0).to(torch.int32)
    if name in ("psum_num_recv_tokens_per_expert", "num_unaligned_recv_tokens_per_expert"):
        counts, aligned = r.counts()
        if name == "num_unaligned_recv_tokens_per_expert":
            return counts
        psum = torch.cumsum(aligned, 0).to(torch.int32)
        return psum - aligned + counts if r.do_expand else psum
    if name == "dst_buffer_slot_idx":
        idx = r.topk_idx
        return torch.where(idx >= 0, idx // r.num_local_experts, -1).to(torch.int32)
    # recv_src_metadata
    psum_src = r.psum_src()
    rows = r.rows
    row = torch.arange(rows, device=psum_src.device, dtype=torch.int64)
    valid = row < psum_src[-1].long()
    src_rank = torch.searchsorted(psum_src.long(), row, right=True)
    meta = torch.full((rows, 2 + r.recv_topk_idx.size(1)), -1, dtype=torch.int32, device=row.device)
    meta[:, 0] = torch.where(valid, src_rank * r.num_max_tokens_per_rank + r.recv_src_idx.long(), -1)
    meta[:, 1] = torch.where(valid, src_rank, -1)
    if r.do_expand:
        meta[:, 2:] = r.slot
    return meta


# The buffer -------------------------------------------------------------


class ElasticBuffer:
    """DeepEP V2's ElasticBuffer (dd758ca) over epkit's engine: dispatch and
    combine, on one node and across nodes (NVLink inside a node, the
    engine's network leg between: V2's hybrid mode). Engram, pipeline
    send/recv and AGRS raise NotImplementedError.

    epkit-only keyword arguments: ranks_per_node (default: as the hosts
    say, or $EPKIT_RANKS_PER_NODE), exact_combine_order (True: V2's
    summation order, bitwise; False: the engine's, a narrower combine)."""

    def __init__(self, group, num_bytes: Optional[int] = None, num_cpu_bytes: int = 0,
                 num_max_tokens_per_rank: int = 0, hidden: int = 0, num_topk: int = 0,
                 use_fp8_dispatch: bool = False, deterministic: bool = False, allow_hybrid_mode: bool = True,
                 allow_multiple_reduction: bool = True, prefer_overlap_with_compute: bool = True, sl_idx: int = 3,
                 num_allocated_qps: int = 0, num_cpu_timeout_secs: int = 300, num_gpu_timeout_secs: int = 100,
                 explicitly_destroy: bool = False, *, ranks_per_node: Optional[int] = None,
                 exact_combine_order: bool = True) -> None:
        self.runtime = None
        self.explicitly_destroy = explicitly_destroy
        check_constructor(group.size(), num_bytes, num_cpu_bytes, num_max_tokens_per_rank, hidden, num_topk)
        torch = _torch()
        self._torch = torch
        self.group = group
        self.rank_idx = group.rank()
        self.num_ranks = group.size()
        self.allow_hybrid_mode = allow_hybrid_mode
        self.allow_multiple_reduction = allow_multiple_reduction
        self.prefer_overlap_with_compute = prefer_overlap_with_compute
        self.deterministic = deterministic
        self.exact_combine_order = exact_combine_order
        self.num_nvlink_ranks = find_ranks_per_node(group, ranks_per_node)
        self.num_rdma_ranks = self.num_ranks // self.num_nvlink_ranks
        if allow_hybrid_mode and self.num_rdma_ranks > 1:
            self.num_scaleout_ranks, self.num_scaleup_ranks = self.num_rdma_ranks, self.num_nvlink_ranks
        else:
            self.num_scaleout_ranks, self.num_scaleup_ranks = 1, self.num_ranks
        self.scaleout_rank_idx = self.rank_idx // self.num_scaleup_ranks
        self.scaleup_rank_idx = self.rank_idx % self.num_scaleup_ranks
        if num_allocated_qps == 0:
            # V2's defaults (epkit's network leg is NCCL: QPs are not used).
            num_allocated_qps = 65 if allow_hybrid_mode else 17
        self.num_allocated_qps = num_allocated_qps

        self._hidden = hidden if hidden > 0 else 7168
        self._max_topk = num_topk if num_topk > 0 else 8
        self._width = combine_width(self.num_ranks, self._max_topk, allow_multiple_reduction, exact_combine_order)
        self.runtime = Buffer(group, **runtime_buffer_args(
            self.num_ranks, num_bytes, num_max_tokens_per_rank, self._hidden, self._width, self._max_topk,
            num_gpu_timeout_secs, self.num_nvlink_ranks))
        self.num_max_tokens_per_rank = num_max_tokens_per_rank if num_max_tokens_per_rank > 0 else \
            self.runtime.max_tokens
        self.num_bytes = num_bytes if num_bytes is not None else align(
            engine_bytes(self.num_ranks, self.num_nvlink_ranks, self.num_max_tokens_per_rank,
                         self._width * self._hidden, self._max_topk), BUFFER_ALIGNMENT)
        self._configs = {}
        # Asked once: every dispatch without num_sms reads it.
        self._device_sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count

    # Lifetime -------------------------------------------------------------

    def destroy(self) -> None:
        assert self.explicitly_destroy
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            runtime.destroy()

    def __del__(self):
        runtime = getattr(self, "runtime", None)
        if runtime is not None and not getattr(self, "explicitly_destroy", True):
            try:
                self.runtime = None
                runtime.destroy()
            except Exception:  # interpreter shutdown
                pass

    def _live(self) -> Buffer:
        require(self.runtime is not None, "the ElasticBuffer was destroyed")
        return self.runtime

    # Static API -----------------------------------------------------------

    @staticmethod
    def get_buffer_size_hint(group, num_max_tokens_per_rank: int, hidden: int, num_topk: int = 0,
                             use_fp8_dispatch: bool = False, allow_hybrid_mode: bool = True,
                             allow_multiple_reduction: bool = True) -> int:
        """The bytes per GPU an ElasticBuffer of these sizes takes (2 MiB
        aligned): the engine's Buffer, including the exact-order combine's
        wider rows."""
        require(num_max_tokens_per_rank > 0 and hidden > 0, "num_max_tokens_per_rank and hidden must be positive")
        num_ranks = group.size()
        per_node = find_ranks_per_node(group)
        topk = num_topk if num_topk > 0 else 8
        width = combine_width(num_ranks, topk, allow_multiple_reduction, True)
        return align(engine_bytes(num_ranks, per_node, num_max_tokens_per_rank, width * hidden, topk),
                     BUFFER_ALIGNMENT)

    @staticmethod
    def capture() -> EventHandle:
        return EventHandle()

    def get_comm_stream(self):
        return self._live().get_comm_stream()

    def get_physical_domain_size(self) -> Tuple[int, int]:
        return self.num_rdma_ranks, self.num_nvlink_ranks

    def get_logical_domain_size(self) -> Tuple[int, int]:
        return self.num_scaleout_ranks, self.num_scaleup_ranks

    def get_theoretical_num_sms(self, num_experts: int, num_topk: int, num_scaleout_topk: int = 0,
                                rdma_gbs: float = 0, nvlink_gbs: float = 0, sm_read_gbs: float = 200,
                                sm_write_gbs: float = 50) -> int:
        """epkit's kernels are tuned at Buffer.num_sms blocks (V1's default,
        20), whatever the bandwidths: V2's model sizes V2's kernels."""
        assert num_scaleout_topk == 0
        num_sms = align(max(2, Buffer.num_sms), 2)
        device_sms = getattr(self, "_device_sms", None)
        return min(num_sms, device_sms) if device_sms else num_sms

    def get_theoretical_num_qps(self, num_sms: int) -> int:
        num_qps = min(num_sms, 8 + 1)
        if self.allow_hybrid_mode:
            num_qps = num_sms * 16 + 1
        return min(num_qps, self.num_allocated_qps)

    def barrier(self, use_comm_stream: bool = True, with_cpu_sync: bool = False, sequential: bool = True) -> None:
        """Every rank's queued work done, then a barrier of the group."""
        import torch.distributed as dist
        self._torch.cuda.synchronize()
        dist.barrier(group=self.group)
        self._torch.cuda.synchronize()

    # Not in epkit's engine: V2's Engram, pipeline send/recv and AGRS calls.

    get_engram_storage_size_hint = _unsupported("Engram", static=True)
    engram_write = engram_fetch = _unsupported("Engram")
    get_pp_buffer_size_hint = _unsupported("pipeline-parallel send/recv", static=True)
    pp_set_config = pp_send = pp_recv = _unsupported("pipeline-parallel send/recv")
    get_agrs_num_max_session_bytes = get_agrs_buffer_size_hint = _unsupported("AGRS (all-gather reduce-scatter)",
                                                                              static=True)
    create_agrs_session = destroy_agrs_session = agrs_new_session = agrs_set_config = \
        agrs_get_inplace_tensor = all_gather = _unsupported("AGRS (all-gather reduce-scatter)")

    # Helpers --------------------------------------------------------------

    #: Made on the first call (_Plan).
    _plan: Optional[_Plan] = None

    def _make_plan(self) -> _Plan:
        self._plan = _Plan(self)
        return self._plan

    def _default_num_sms(self, plan: _Plan) -> int:
        """get_theoretical_num_sms, asked again only when Buffer.num_sms changed."""
        if plan.v1_num_sms != Buffer.num_sms:
            plan.v1_num_sms, plan.num_sms = Buffer.num_sms, self.get_theoretical_num_sms(0, 0)
        return plan.num_sms

    def _default_num_qps(self, plan: _Plan, num_sms: int) -> int:
        num_qps = plan.qps.get(num_sms)
        if num_qps is None:
            num_qps = plan.qps[num_sms] = self.get_theoretical_num_qps(num_sms)
        return num_qps

    def _config(self, num_sms: int) -> Config:
        """The Config of an SM count (made once; looked up by the count as
        given and as aligned)."""
        config = self._configs.get(num_sms)
        if config is None:
            aligned = align(num_sms, 2)
            config = self._configs.get(aligned)
            if config is None:
                config = self._configs[aligned] = Config(aligned)
            self._configs[num_sms] = config
        return config

    @staticmethod
    def _wait(*events) -> None:
        for event in events:
            if event is not None:
                event.current_stream_wait()

    def _side_dispatch(self, v1, columns, config: Config):
        """Int32 columns of every token, to where its row went (a cached V1
        dispatch of a 256-byte payload: the bytes are copied, not converted)."""
        torch = self._torch
        n, c = columns.size(0), columns.size(1)
        payload = torch.zeros((n, _PAYLOAD_COLUMNS), dtype=torch.bfloat16, device=columns.device)
        payload.view(torch.int32)[:, :c] = columns
        recv = self._live().dispatch(payload, handle=v1, config=config)[0]
        return recv.view(torch.int32)[:, :c]

    @staticmethod
    def _sf_layout(torch, sf, tma_aligned: bool):
        if not tma_aligned:
            return sf if sf.is_contiguous() else sf.contiguous()
        rows, packs = sf.size(0), sf.size(1)
        out = torch.empty_strided((rows, packs), (1, align(max(rows, 1), _TMA_ALIGNED_SF_PACKS)), dtype=sf.dtype,
                                  device=sf.device)
        out.copy_(sf)
        return out

    def _expand(self, recv_x, recv_sf, recv_w, slot, expanded_rows: int, do_zero_padding: bool):
        """Rows in the expanded layout: one per (token, local top-k slot),
        experts in order, each expert's rows padded to expert_alignment."""
        torch = self._torch
        safe = torch.where(slot >= 0, slot, expanded_rows)  # the spare last row takes the misses
        num_topk = slot.size(1)

        def spread(src):
            # FP8 rows move as bytes (index_copy_ has no FP8 kernels).
            raw = src.view(torch.uint8) if src.element_size() == 1 else src
            make = torch.zeros if do_zero_padding else torch.empty
            out = make((expanded_rows + 1, raw.size(1)), dtype=raw.dtype, device=raw.device)
            for k in range(num_topk):
                out.index_copy_(0, safe[:, k], raw)
            return out[:expanded_rows].view(src.dtype)

        x = spread(recv_x)
        sf = spread(recv_sf) if recv_sf is not None else None
        w = None
        if recv_w is not None:
            w = torch.zeros((expanded_rows + 1,), dtype=recv_w.dtype, device=recv_w.device)
            for k in range(num_topk):
                w.index_copy_(0, safe[:, k], recv_w[:, k])
            w = w[:expanded_rows]
        return x, sf, w

    # Dispatch -------------------------------------------------------------
    #
    # Host cost: a call checks V2's asserts with a few comparisons where its
    # arguments are the usual ones (BF16 tensors; a cached dispatch or a
    # combine against what its handle's dispatch already checked) and runs
    # the full checks (check_dispatch, check_cached, check_combine: the
    # messages) otherwise; beyond the V1 calls it runs no tensor operation
    # that V2 does not (the handle's topk_idx copy), and derives the handle's
    # tensor fields only when read.

    def dispatch(self, x, topk_idx=None, topk_weights=None, cumulative_local_expert_recv_stats=None,
                 num_experts: Optional[int] = None, num_max_tokens_per_rank: Optional[int] = None,
                 expert_alignment: Optional[int] = None, num_sms: int = 0, num_qps: int = 0,
                 previous_event: Optional[EventHandle] = None,
                 previous_event_before_epilogue: Optional[EventHandle] = None,
                 async_with_compute_stream: bool = False, allocate_on_comm_stream: bool = False,
                 handle: Optional[EPHandle] = None, do_handle_copy: bool = True, do_cpu_sync: Optional[bool] = None,
                 do_expand: bool = False, do_zero_padding: bool = False, use_tma_aligned_col_major_sf: bool = False):
        buffer = self.runtime
        if buffer is None:
            self._live()
        p = self._plan or self._make_plan()
        if num_sms == 0:
            num_sms = p.num_sms if p.v1_num_sms == Buffer.num_sms else self._default_num_sms(p)
        # num_qps: V2's default is at most num_allocated_qps, so only a given
        # one is checked (the engine has no QPs to size).
        if handle is not None:
            # Against what the handle's dispatch checked: only x, the weights
            # and this call's own arguments are new.
            checked = False
            if topk_idx is None and not do_cpu_sync and cumulative_local_expert_recv_stats is None:
                try:
                    r: _Routing = handle._routing
                    xs = x.shape
                    checked = (handle._proof is p and x.dtype is p.bf16 and len(xs) == 2 and
                               xs[0] == handle._num_tokens and 0 < xs[1] <= p.hidden and xs[1] % 128 == 0 and
                               do_expand == handle.do_expand and
                               (num_experts is None or num_experts == r.num_experts == handle.num_experts) and
                               (expert_alignment is None or
                                expert_alignment == r.expert_alignment == handle.expert_alignment) and
                               (num_max_tokens_per_rank is None or
                                num_max_tokens_per_rank == r.num_max_tokens_per_rank ==
                                handle.num_max_tokens_per_rank) and
                               0 < num_sms <= p.sms_limit and num_qps <= p.num_allocated_qps and
                               (do_expand or not do_zero_padding) and
                               (previous_event is None or allocate_on_comm_stream) and not p.deterministic() and
                               x.is_contiguous() and
                               (topk_weights is None or (topk_weights.dtype is p.f32 and
                                                         topk_weights.shape == r.topk_idx.shape and
                                                         topk_weights.is_contiguous())))
                except (AttributeError, TypeError):  # x a tuple (FP8), not a tensor, or not an epkit handle
                    checked = False
            if not checked:
                self._check_cached(p, x, topk_idx, topk_weights, cumulative_local_expert_recv_stats, num_experts,
                                   num_max_tokens_per_rank, expert_alignment, num_sms, num_qps, handle, do_cpu_sync,
                                   do_expand, do_zero_padding, previous_event, allocate_on_comm_stream)
            if previous_event is not None:
                previous_event.current_stream_wait()
            if previous_event_before_epilogue is not None:
                previous_event_before_epilogue.current_stream_wait()
            config = self._configs.get(num_sms) or self._config(num_sms)
            if topk_weights is None and not handle.do_expand and not isinstance(x, tuple):
                return buffer._cached_recv_x(x, handle._v1, config), handle._routing.recv_topk_idx, \
                    None, handle, _event_of(async_with_compute_stream)
            return self._cached_dispatch(buffer, x, topk_weights, handle, config, do_zero_padding,
                                         use_tma_aligned_col_major_sf, async_with_compute_stream)
        torch = p.torch
        x, sf = x if isinstance(x, tuple) else (x, None)
        if num_max_tokens_per_rank is None:
            num_max_tokens_per_rank = self.num_max_tokens_per_rank
        if expert_alignment is None:
            expert_alignment = 1
        if do_cpu_sync is None:
            do_cpu_sync = True

        # check_dispatch's checks, where every one passes (else it names the failure).
        checked = False
        if sf is None and cumulative_local_expert_recv_stats is None:
            try:
                xs, ts = x.shape, topk_idx.shape
                checked = (x.dtype is p.bf16 and topk_idx.dtype is p.i64 and len(xs) == 2 and len(ts) == 2 and
                           ts[0] == xs[0] <= num_max_tokens_per_rank <= p.max_tokens and
                           0 < xs[1] <= p.hidden and xs[1] % 128 == 0 and 1 <= ts[1] <= p.max_topk and
                           num_experts > 0 and num_experts % p.num_ranks == 0 and expert_alignment >= 1 and
                           0 < num_sms <= p.sms_limit and num_qps <= p.num_allocated_qps and
                           (do_expand or not do_zero_padding) and
                           (previous_event is None or allocate_on_comm_stream) and not p.deterministic() and
                           x.is_contiguous() and topk_idx.is_contiguous() and
                           (topk_weights is None or (topk_weights.dtype is p.f32 and topk_weights.shape == ts and
                                                     topk_weights.is_contiguous())))
            except (AttributeError, TypeError):
                checked = False
        if not checked:
            self._check_dispatch(p, x, sf, topk_idx, topk_weights, cumulative_local_expert_recv_stats, num_experts,
                                 num_max_tokens_per_rank, expert_alignment, num_sms, num_qps, do_expand,
                                 do_zero_padding, previous_event, allocate_on_comm_stream)
            ts = topk_idx.shape
        if previous_event is not None:
            previous_event.current_stream_wait()
        if previous_event_before_epilogue is not None:
            previous_event_before_epilogue.current_stream_wait()
        config = self._configs.get(num_sms) or self._config(num_sms)

        num_tokens, num_topk = ts[0], ts[1]
        weights = topk_weights if topk_weights is not None else \
            torch.zeros(topk_idx.shape, dtype=torch.float32, device=topk_idx.device)
        worst_tokens = worst_expanded = 0
        if not do_cpu_sync:
            worst_tokens, worst_expanded = worst_case_rows(p.num_ranks, num_max_tokens_per_rank, num_topk,
                                                           num_experts // p.num_ranks, expert_alignment)
        # The layout and the dispatch in one call; the handle's copy of
        # topk_idx comes from the layout kernel.
        recv_x, recv_topk_idx, recv_w, counts_list, v1, handle_idx = buffer._layout_dispatch(
            x, sf, topk_idx, weights, num_experts, expert_alignment, worst_tokens, config, do_handle_copy)
        if handle_idx is None:
            handle_idx = topk_idx
        recv_sf = None
        if sf is not None:
            recv_x, recv_sf = recv_x
        rows = recv_topk_idx.size(0)

        r = _routing(p, v1, recv_topk_idx, rows, num_experts, expert_alignment, num_max_tokens_per_rank, do_expand)
        if cumulative_local_expert_recv_stats is not None:
            cumulative_local_expert_recv_stats.add_(r.counts()[0])
        if do_cpu_sync:
            # V1's counts are V2's list: rows per local expert, aligned. Their
            # sum is num_expanded_tokens: made now in expand mode, which needs
            # it, else on first read (a sum of every local expert's count).
            aligned_list, expanded_rows = counts_list, sum(counts_list) if do_expand else None
            r.counts_list = counts_list
        else:
            aligned_list, expanded_rows = [], worst_expanded
        if p.single_node:
            r.recv_src_idx = v1[3]
        else:
            # V1 has no recv_src_idx across nodes: the indices travel in a
            # cached dispatch (collective, so done now, not on first read).
            index = torch.arange(num_tokens, dtype=torch.int32, device=topk_idx.device).view(-1, 1)
            r.recv_src_idx = self._side_dispatch(v1, index, config)[:, 0]

        out_w = recv_w if topk_weights is not None else None
        if do_expand:
            # Each (row, slot) to its expert's next row, in receive order.
            counts, aligned = r.counts()
            valid = recv_topk_idx >= 0
            key = torch.where(valid, recv_topk_idx, r.num_local_experts).flatten()
            order = torch.sort(key, stable=True).indices
            position = torch.empty_like(order)
            position[order] = torch.arange(order.numel(), device=order.device)
            starts = torch.cumsum(aligned, 0).long() - aligned.long()
            first = torch.cumsum(counts, 0).long() - counts.long()
            pad = starts.new_zeros(1)
            slot = torch.cat([starts, pad])[key] + position - torch.cat([first, pad])[key]
            r.slot = torch.where(valid.flatten(), slot, -1).view(rows, num_topk).to(torch.int32)
            recv_x, recv_sf, out_w = self._expand(recv_x, recv_sf, out_w, r.slot.long(), expanded_rows,
                                                  do_zero_padding)
            recv_topk_idx = None
        if recv_sf is not None:
            recv_sf = self._sf_layout(torch, recv_sf, use_tma_aligned_col_major_sf)

        r.topk_idx = handle_idx
        # EPHandle(...)'s fields, set at once (host cost; the simulation
        # checks they are __init__'s).
        new = _new_object(EPHandle)
        new.__dict__ = {
            "do_expand": do_expand, "num_experts": num_experts, "expert_alignment": expert_alignment,
            "num_max_tokens_per_rank": num_max_tokens_per_rank, "num_sms": num_sms, "topk_idx": handle_idx,
            "num_recv_tokens": rows, "num_recv_tokens_per_expert_list": aligned_list, "_rows": rows,
            "_num_tokens": num_tokens, "_num_topk": num_topk, "_v1": v1, "_routing": r, "_proof": p}
        if expanded_rows is not None:
            new.__dict__["num_expanded_tokens"] = new.__dict__["_expanded_rows"] = expanded_rows
        if not do_cpu_sync and p.capturing():
            # A captured call makes every field now: one derived on a later
            # read would hold that replay's values only.
            for name in _LAZY_FIELDS:
                getattr(new, name)
        return (recv_x if recv_sf is None else (recv_x, recv_sf)), recv_topk_idx, out_w, new, \
            _event_of(async_with_compute_stream)

    def _check_dispatch(self, p: _Plan, x, sf, topk_idx, topk_weights, stats, num_experts, num_max_tokens_per_rank,
                        expert_alignment, num_sms, num_qps, do_expand, do_zero_padding, previous_event=None,
                        allocate_on_comm_stream: bool = False) -> None:
        """Every check of a dispatch, naming the first that fails."""
        check_torch_deterministic(p.torch)
        if num_qps == 0:
            num_qps = p.qps.get(num_sms) or self._default_num_qps(p, num_sms)
        check_dispatch(x, sf, topk_idx, topk_weights, stats, num_experts, self.num_ranks, num_max_tokens_per_rank,
                       expert_alignment, num_sms, num_qps, self.num_allocated_qps, do_expand, do_zero_padding,
                       previous_event, allocate_on_comm_stream, p.max_num_sms)
        require(num_max_tokens_per_rank <= p.max_tokens,
                f"num_max_tokens_per_rank {num_max_tokens_per_rank} is more than the buffer holds "
                f"({p.max_tokens})")
        num_topk = topk_idx.size(1)
        require(x.size(1) <= self._hidden and num_topk <= self._max_topk,
                f"hidden {x.size(1)}, top-{num_topk}: the buffer was made for hidden {self._hidden}, "
                f"top-{self._max_topk} (ElasticBuffer's hidden= and num_topk=)")

    def _check_cached(self, p: _Plan, x, topk_idx, topk_weights, stats, num_experts, num_max_tokens_per_rank,
                      expert_alignment, num_sms: int, num_qps: int, handle, do_cpu_sync, do_expand: bool,
                      do_zero_padding: bool, previous_event=None, allocate_on_comm_stream: bool = False) -> None:
        """Every check of a cached dispatch, naming the first that fails."""
        require(isinstance(handle, EPHandle) and handle._v1 is not None,
                "the handle must come from epkit.deep_ep.ElasticBuffer.dispatch")
        num_experts, expert_alignment, num_max_tokens_per_rank = check_cached(
            handle, topk_idx, do_cpu_sync, num_experts, expert_alignment, num_max_tokens_per_rank, do_expand)
        x, sf = x if isinstance(x, tuple) else (x, None)
        self._check_dispatch(p, x, sf, handle.topk_idx, topk_weights, stats, num_experts, num_max_tokens_per_rank,
                             expert_alignment, num_sms, num_qps, do_expand, do_zero_padding, previous_event,
                             allocate_on_comm_stream)

    def _cached_dispatch(self, buffer: Buffer, x, topk_weights, handle: EPHandle, config: Config,
                         do_zero_padding: bool, tma_sf: bool, async_with_compute_stream: bool):
        """A cached dispatch with weights, FP8 or the expanded layout."""
        torch = self._torch
        x, sf = x if isinstance(x, tuple) else (x, None)
        recv = buffer.dispatch(x if sf is None else (x, sf), handle=handle._v1, config=config)[0]
        recv_x, recv_sf = recv if sf is not None else (recv, None)
        r = handle._routing
        recv_w = None
        if topk_weights is not None:
            # V1's cached dispatch takes no weights: their bits travel as a payload.
            bits = self._side_dispatch(handle._v1, topk_weights.view(torch.int32), config)
            recv_w = bits.contiguous().view(torch.float32)
            recv_w = recv_w.masked_fill(r.recv_topk_idx < 0, 0.0)
        recv_topk_idx = r.recv_topk_idx
        if handle.do_expand:
            recv_x, recv_sf, recv_w = self._expand(recv_x, recv_sf, recv_w, r.slot.long(), handle._expanded_rows,
                                                   do_zero_padding)
            recv_topk_idx = None
        if recv_sf is not None:
            recv_sf = self._sf_layout(torch, recv_sf, tma_sf)
        return (recv_x if recv_sf is None else (recv_x, recv_sf)), recv_topk_idx, recv_w, handle, \
            _event_of(async_with_compute_stream)

    # Combine --------------------------------------------------------------

    @staticmethod
    def _unpack_bias(bias) -> Tuple[Any, Any]:
        return unpack_bias(bias)

    def _recipe(self, do_expand: bool) -> Tuple[bool, bool]:
        """V2's reductions: (inside each destination rank, inside each node)."""
        if do_expand and not self.allow_multiple_reduction:
            return False, False
        if self.allow_multiple_reduction and self.num_scaleout_ranks > 1:
            return True, True
        return True, False

    def _engine_order_is_exact(self, recipe: Tuple[bool, bool], num_topk: int, with_bias: bool) -> bool:
        """Whether the engine's rank-order sum gives V2's bits: no bias and at
        most two contributions per sum (two floats add the same either way)."""
        if with_bias or recipe == (False, False):
            return False  # the biases go first: the token's rank adds them
        if recipe == (True, False):
            return self.num_rdma_ranks == 1 and min(self.num_ranks, num_topk) <= 2
        return min(self.num_nvlink_ranks, num_topk) <= 2 and min(self.num_rdma_ranks, num_topk) <= 2

    def _engine_sums(self, p: _Plan, num_topk: int, with_bias: bool) -> bool:
        """Whether a combine without do_expand is the engine's own (its
        order gives V2's bits, or the caller asked for the engine's order)."""
        key = (num_topk, with_bias)
        engine = p.engine_sum.get(key)
        if engine is None:
            engine = p.engine_sum[key] = not self.exact_combine_order or \
                self._engine_order_is_exact(self._recipe(False), num_topk, with_bias)
        return engine

    def combine(self, x, handle: EPHandle, topk_weights=None, bias=None, num_sms: int = 0, num_qps: int = 0,
                previous_event: Optional[EventHandle] = None,
                previous_event_before_epilogue: Optional[EventHandle] = None,
                async_with_compute_stream: bool = False, allocate_on_comm_stream: bool = False):
        buffer = self.runtime
        if buffer is None:
            self._live()
        p = self._plan or self._make_plan()
        if num_sms == 0:
            num_sms = getattr(handle, "num_sms", 0)  # not a handle: check_combine says so
        biases = (None, None) if bias is None else unpack_bias(bias)
        # check_combine's checks against what the handle's dispatch checked,
        # where every one passes (else it names the failure).
        checked = False
        if bias is None:
            try:
                xs = x.shape
                if handle.do_expand:
                    rows_ok = xs[0] >= handle._expanded_rows
                    weights_ok = topk_weights is None or (
                        self.allow_multiple_reduction and topk_weights.dtype is p.f32 and
                        topk_weights.shape == (xs[0],) and topk_weights.is_contiguous())
                else:
                    rows_ok = xs[0] == handle._rows
                    weights_ok = topk_weights is None or (
                        topk_weights.dtype is p.f32 and topk_weights.shape == (xs[0], handle._num_topk) and
                        topk_weights.is_contiguous())
                checked = (handle._proof is p and x.dtype is p.bf16 and len(xs) == 2 and rows_ok and
                           xs[1] % 8 == 0 and weights_ok and num_sms > 0 and num_qps <= p.num_allocated_qps and
                           (previous_event is None or allocate_on_comm_stream) and not p.deterministic() and
                           x.is_contiguous())
            except (AttributeError, TypeError):
                checked = False
        if not checked:
            check_torch_deterministic(p.torch)
            if num_qps == 0:
                num_qps = p.qps.get(num_sms) or self._default_num_qps(p, num_sms)
            check_combine(x, topk_weights, biases, handle, num_qps, self.num_allocated_qps,
                          self.allow_multiple_reduction, num_sms, previous_event, allocate_on_comm_stream)
        if previous_event is not None:
            previous_event.current_stream_wait()
        if previous_event_before_epilogue is not None:
            previous_event_before_epilogue.current_stream_wait()
        config = self._configs.get(num_sms) or self._config(num_sms)
        with_bias = biases[0] is not None or biases[1] is not None
        if not handle.do_expand and (p.engine_sum.get((handle._num_topk, with_bias)) or
                                     self._engine_sums(p, handle._num_topk, with_bias)):
            # The engine's own sum gives V2's bits (or the caller asked for it).
            combined, combined_w = buffer._combine_plain(x, handle._v1, topk_weights, bias if with_bias else None,
                                                         config)
        else:
            combined, combined_w = self._combine_in_order(buffer, x, handle, topk_weights, bias, biases, config)
        return combined, combined_w, _event_of(async_with_compute_stream)

    def _combine_in_order(self, buffer: Buffer, x, handle: EPHandle, topk_weights, bias, biases, config: Config):
        """A combine that is not the engine's sum alone: expand mode's
        reduction inside the rank first, and V2's summation order."""
        torch = self._torch
        r: _Routing = handle._routing
        num_topk = handle._num_topk
        recipe = self._recipe(handle.do_expand)
        with_bias = biases[0] is not None or biases[1] is not None

        per_slot = None  # (no multiple reduction) the expanded rows of each top-k slot
        if handle.do_expand:
            slot = r.slot.long()
            hit = slot >= 0
            safe = torch.where(hit, slot, 0)
            weights = None
            if topk_weights is not None:
                weights = topk_weights[safe].masked_fill(~hit, 0.0)
            if recipe == (False, False):
                per_slot = [x.index_select(0, safe[:, k]).masked_fill(~hit[:, k, None], 0) for k in range(num_topk)]
                partial = None
            else:
                # The rank's partial sum: its slots in top-k order, in FP32 from zero.
                acc = torch.zeros((r.rows, x.size(1)), dtype=torch.float32, device=x.device)
                for k in range(num_topk):
                    acc += x.index_select(0, safe[:, k]).float().masked_fill_(~hit[:, k, None], 0.0)
                partial = acc.to(torch.bfloat16)
            mine = hit
        else:
            partial, weights = x, topk_weights
            mine = r.recv_topk_idx >= 0

        # The engine's own sum where it gives V2's bits, or where the caller
        # asked for the engine's order (exact_combine_order=False: one block).
        exact = self.exact_combine_order
        if per_slot is None and (not exact or self._engine_order_is_exact(recipe, num_topk, with_bias)):
            combined, combined_w, _ = buffer.combine(partial, handle._v1, topk_weights=weights,
                                                     bias=bias if with_bias else None, config=config)
            return combined, combined_w
        if not exact:
            raise _not_implemented("expand-mode combine without multiple reduction when exact_combine_order=False")
        return self._exact_combine(buffer, partial, per_slot, weights, mine, handle, biases, recipe, config)

    def _exact_combine(self, buffer: Buffer, partial, per_slot, weights, mine, handle: EPHandle, biases, recipe,
                       config: Config):
        """V2's summation order: every destination's contribution to a token
        travels in its own column block; the token's rank adds them."""
        torch = self._torch
        r: _Routing = handle._routing
        rows, num_topk = r.rows, handle._num_topk
        hidden = (partial if partial is not None else per_slot[0]).size(1)
        width = self._width
        by_rank = width == self.num_ranks and per_slot is None
        require(by_rank or width >= num_topk,
                f"top-{num_topk} needs a buffer made for it (num_topk={num_topk} at construction)")
        device = mine.device
        wide = torch.zeros((rows, width, hidden), dtype=torch.bfloat16, device=device)
        if per_slot is not None:
            for k in range(num_topk):
                wide[:, k] = per_slot[k]
        elif by_rank:
            wide[:, self.rank_idx] = partial
        else:
            # The rank's partial goes to the last top-k slot it holds.
            ks = torch.arange(1, num_topk + 1, device=device)
            last = (mine.long() * ks).max(1).values - 1
            wide[torch.arange(rows, device=device), last.clamp(min=0)] = partial
        combined_wide, combined_w, _ = buffer.combine(wide.view(rows, width * hidden), handle._v1,
                                                      topk_weights=weights, config=config)

        idx = handle.topk_idx
        num_tokens = idx.size(0)
        token = torch.arange(num_tokens, device=device)
        owner = torch.where(idx >= 0, idx // r.num_local_experts, -1)
        blocks = combined_wide.view(num_tokens, width, hidden)
        later = torch.ones((num_topk, num_topk), dtype=torch.bool, device=device).triu(1)

        def last_of_group(group):
            same = group[:, :, None] == group[:, None, :]
            return (group >= 0) & ~(same & later).any(-1)

        rank_last = last_of_group(owner) if by_rank else None

        def value(k):
            """The contribution of slot k: the partial of the rank whose
            last slot k is, zero elsewhere (per_slot: slot k's own row)."""
            if not by_rank:
                return blocks[:, k].float()
            v = blocks[token, owner[:, k].clamp(min=0)].float()
            return v.masked_fill_(~rank_last[:, k, None], 0.0)

        b0, b1 = biases
        if b0 is not None and b1 is not None:
            acc = b0.float() + b1.float()
        elif b0 is not None or b1 is not None:
            acc = (b0 if b0 is not None else b1).float()
        else:
            acc = torch.zeros((num_tokens, hidden), dtype=torch.float32, device=device)
        if recipe == (True, True):
            nodes = self.num_rdma_ranks
            node = torch.where(owner >= 0, owner // self.num_nvlink_ranks, -1)
            node_sum = torch.zeros((num_tokens * nodes, hidden), dtype=torch.float32, device=device)
            flat = token[:, None] * nodes + node.clamp(min=0)
            for k in range(num_topk):
                node_sum.index_add_(0, flat[:, k], value(k))
            node_sum = node_sum.to(torch.bfloat16).view(num_tokens, nodes, hidden)
            node_last = last_of_group(node)
            for k in range(num_topk):
                acc += node_sum[token, node[:, k].clamp(min=0)].float().masked_fill_(~node_last[:, k, None], 0.0)
        else:
            for k in range(num_topk):
                acc += value(k)
        return acc.to(torch.bfloat16), combined_w
