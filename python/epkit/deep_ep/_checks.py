"""Argument checks of the DeepEP API, done before any engine call.

They mirror where DeepEP V1 refuses an argument (its Python asserts and its
C++ host asserts) and need no PyTorch: a tensor is anything with dim(),
size(), stride(), is_contiguous(), data_ptr() and a dtype whose str() is
PyTorch's name ("torch.bfloat16").
"""

from .. import _native

_DTYPES = {
    "torch.bfloat16": _native.BF16,
    "torch.float8_e4m3fn": _native.FP8_E4M3,
    "torch.float32": _native.FP32,
    "torch.int32": _native.INT32,
    "torch.int64": _native.INT64,
    "torch.bool": _native.BOOL,
}
_SIZES = {_native.BF16: 2, _native.FP8_E4M3: 1, _native.FP32: 4, _native.INT32: 4, _native.INT64: 8,
          _native.BOOL: 1}
MAX_LOCAL_EXPERTS = 1024


class EPAssertionError(AssertionError, RuntimeError):
    """A refused argument. DeepEP raises AssertionError from Python and
    RuntimeError from its C++ checks; this is both, so either `except`
    catches it."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise EPAssertionError(message)


def dtype_code(t, name: str) -> int:
    code = _DTYPES.get(str(t.dtype))
    require(code is not None, f"{name} has dtype {t.dtype}, which the engine does not take")
    return code


def matrix(t, name: str, dtype=None) -> None:
    require(t.dim() == 2 and t.is_contiguous(), f"{name} must be a contiguous 2-D tensor")
    if dtype is not None:
        require(str(t.dtype) == dtype, f"{name} must be {dtype}, not {t.dtype}")


def vector(t, name: str, dtype=None) -> None:
    require(t.dim() == 1 and t.is_contiguous(), f"{name} must be a contiguous 1-D tensor")
    if dtype is not None:
        require(str(t.dtype) == dtype, f"{name} must be {dtype}, not {t.dtype}")


def describe(t, name: str) -> "_native.Tensor":
    """The C descriptor of a tensor (None: not given)."""
    if t is None:
        return _native.Tensor()
    require(t.dim() in (1, 2, 3), f"{name} must be 1-D to 3-D, not {t.dim()}-D")
    code = dtype_code(t, name)
    shape = tuple(t.size())
    return _native.tensor(t.data_ptr(), code, shape, tuple(t.stride()))


def order_flags(previous_event, async_finish: bool, allocate_on_comm_stream: bool) -> None:
    if allocate_on_comm_stream:
        require(previous_event is not None and async_finish,
                "allocate_on_comm_stream needs previous_event and async_finish")


def config(config, op: str) -> None:
    require(config.num_sms % 2 == 0, f"{op}: Config.num_sms must be even, not {config.num_sms}")


def layout(topk_idx, num_experts: int) -> None:
    require(topk_idx.dim() == 2 and topk_idx.is_contiguous(), "topk_idx must be a contiguous 2-D tensor")
    require(str(topk_idx.dtype) == "torch.int64", f"topk_idx must be topk_idx_t (torch.int64), not {topk_idx.dtype}")
    require(num_experts > 0, f"num_experts must be positive, not {num_experts}")


def dispatch(x, x_scales, handle_given: bool, num_tokens_per_rank, is_token_in_rank,
             num_tokens_per_expert, topk_idx, topk_weights, num_ranks: int, expert_alignment: int,
             num_worst_tokens: int) -> None:
    """DeepEP's intranode dispatch checks (cached when handle_given)."""
    if handle_given:
        require(topk_idx is None and topk_weights is None,
                "a cached dispatch (handle given) takes no topk_idx or topk_weights")
    else:
        require(num_tokens_per_rank is not None and is_token_in_rank is not None and
                num_tokens_per_expert is not None,
                "dispatch needs num_tokens_per_rank, is_token_in_rank and num_tokens_per_expert "
                "(from get_dispatch_layout) or a handle")
    matrix(x, "x")
    require(str(x.dtype) in ("torch.bfloat16", "torch.float8_e4m3fn"),
            f"x must be torch.bfloat16, or torch.float8_e4m3fn with scales, not {x.dtype}")
    require((x.size(1) * x.element_size()) % 16 == 0, "x rows must be a multiple of 16 bytes")
    require(x.size(1) % 128 == 0, f"hidden {x.size(1)} must be a multiple of 128")
    num_tokens = x.size(0)
    if is_token_in_rank is not None:
        matrix(is_token_in_rank, "is_token_in_rank", "torch.bool")
        require(is_token_in_rank.size(0) == num_tokens and is_token_in_rank.size(1) == num_ranks,
                f"is_token_in_rank must be [{num_tokens}, {num_ranks}], not {tuple(is_token_in_rank.size())}")
    if not handle_given:
        vector(num_tokens_per_expert, "num_tokens_per_expert", "torch.int32")
        require(num_tokens_per_expert.size(0) % num_ranks == 0,
                "the expert count must be a multiple of the rank count")
        require(num_tokens_per_expert.size(0) // num_ranks <= MAX_LOCAL_EXPERTS,
                f"at most {MAX_LOCAL_EXPERTS} local experts")
        vector(num_tokens_per_rank, "num_tokens_per_rank", "torch.int32")
        require(num_tokens_per_rank.size(0) == num_ranks,
                f"num_tokens_per_rank must have {num_ranks} entries")
    require((topk_idx is None) == (topk_weights is None),
            "topk_idx and topk_weights are given together or not at all")
    if topk_idx is not None:
        matrix(topk_idx, "topk_idx", "torch.int64")
        matrix(topk_weights, "topk_weights", "torch.float32")
        require(topk_idx.size(0) == num_tokens and topk_weights.size(0) == num_tokens,
                "topk_idx and topk_weights need one row per token of x")
        require(topk_idx.size(1) == topk_weights.size(1), "topk_idx and topk_weights differ in top-k")
    if x_scales is not None:
        require(x.element_size() == 1, "x_scales go with FP8 x")
        require(str(x_scales.dtype) == "torch.float32", f"x_scales must be torch.float32, not {x_scales.dtype}")
        require(x_scales.dim() == 2 and x_scales.size(0) == num_tokens,
                "x_scales must be [num_tokens, hidden / 128]")
        require(x_scales.size(1) * 128 == x.size(1), "x_scales must be [num_tokens, hidden / 128]")
    else:
        require(str(x.dtype) == "torch.bfloat16", "FP8 x needs x_scales: pass (x, x_scales)")
    require(expert_alignment >= 1, f"expert_alignment must be >= 1, not {expert_alignment}")
    require(num_worst_tokens >= 0, f"num_worst_tokens must be >= 0, not {num_worst_tokens}")


def low_latency_dispatch(x, topk_idx, num_max_dispatch_tokens_per_rank: int, num_experts: int,
                         async_finish: bool, return_recv_hook: bool) -> None:
    """DeepEP's low_latency_dispatch checks."""
    require(not (async_finish and return_recv_hook), "async_finish and return_recv_hook exclude each other")
    matrix(x, "x", "torch.bfloat16")
    require(x.size(1) % 128 == 0, f"hidden {x.size(1)} must be a multiple of 128")
    matrix(topk_idx, "topk_idx", "torch.int64")
    require(topk_idx.size(0) == x.size(0), "topk_idx needs one row per token of x")
    require(x.size(0) <= num_max_dispatch_tokens_per_rank,
            f"{x.size(0)} tokens, more than num_max_dispatch_tokens_per_rank = {num_max_dispatch_tokens_per_rank}")
    require(num_experts > 0, f"num_experts must be positive, not {num_experts}")


def combine(x, topk_weights, num_recv_rows: int) -> None:
    matrix(x, "x", "torch.bfloat16")
    require(x.size(0) == num_recv_rows,
            f"combine x must have the dispatch's {num_recv_rows} received rows, not {x.size(0)}")
    require((x.size(1) * x.element_size()) % 16 == 0, "x rows must be a multiple of 16 bytes")
    if topk_weights is not None:
        matrix(topk_weights, "topk_weights", "torch.float32")
        require(topk_weights.size(0) == x.size(0), "topk_weights needs one row per row of x")
