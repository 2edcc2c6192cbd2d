"""ctypes bindings to libepkit_ep.so, the engine's C ABI (include/epkit/ep_c.h).

No PyTorch here: this module loads with the standard library only, so that
`import epkit` works on any machine and can say why the engine cannot run.
"""

import ctypes
import os
import pathlib
from typing import List, Optional

ABI_VERSION = 5
LIBRARY_NAME = "libepkit_ep.so"

OK, ERR_INVALID, ERR_UNAVAILABLE, ERR_CUDA, ERR_TIMEOUT, ERR_BOOTSTRAP, ERR_INTERNAL = range(7)
BF16, FP8_E4M3, FP32, INT32, INT64, BOOL = range(6)


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 3), ("strides", ctypes.c_int64 * 3)]


class Options(ctypes.Structure):
    _fields_ = [("max_tokens", ctypes.c_int32), ("max_hidden", ctypes.c_int32),
                ("max_topk", ctypes.c_int32), ("num_bytes", ctypes.c_uint64),
                ("timeout_s", ctypes.c_double), ("ranks_per_node", ctypes.c_int32),
                ("low_latency_bytes", ctypes.c_uint64), ("output_arena_bytes", ctypes.c_uint64),
                ("network_leg", ctypes.c_int32), ("emulated_nic_gbps", ctypes.c_double),
                ("emulated_nic_latency_us", ctypes.c_double), ("internode_rings", ctypes.c_int32)]


class Config(ctypes.Structure):
    _fields_ = [("num_sms", ctypes.c_int32), ("num_warps", ctypes.c_int32),
                ("nvl_chunk", ctypes.c_int32)]


class Order(ctypes.Structure):
    _fields_ = [("stream", ctypes.c_void_p), ("previous", ctypes.c_void_p),
                ("async_finish", ctypes.c_int32), ("want_event", ctypes.c_int32)]


class LayoutOut(ctypes.Structure):
    _fields_ = [("num_tokens_per_rank", Tensor), ("num_tokens_per_expert", Tensor),
                ("is_token_in_rank", Tensor), ("num_tokens_per_rdma_rank", Tensor),
                ("event", ctypes.c_void_p), ("topk_idx_copy", Tensor)]


class DispatchInto(ctypes.Structure):
    _fields_ = [("recv_x", Tensor), ("recv_x_scales", Tensor), ("recv_topk_idx", Tensor),
                ("recv_topk_weights", Tensor), ("recv_src_idx", Tensor), ("rank_prefix_matrix", Tensor)]


# The ctypes path never asks for its outputs' memory (the extension does):
# the field stays NULL.
class DispatchArgs(ctypes.Structure):
    _fields_ = [("x", Tensor), ("x_scales", Tensor), ("topk_idx", Tensor), ("topk_weights", Tensor),
                ("num_tokens_per_rank", Tensor), ("is_token_in_rank", Tensor),
                ("num_tokens_per_expert", Tensor), ("handle", ctypes.c_void_p),
                ("expert_alignment", ctypes.c_int32), ("num_worst_tokens", ctypes.c_int32),
                ("config", Config), ("order", Order), ("into", ctypes.c_void_p),
                ("into_user", ctypes.c_void_p)]


class DispatchOut(ctypes.Structure):
    _fields_ = [("recv_x", Tensor), ("recv_x_scales", Tensor), ("recv_topk_idx", Tensor),
                ("recv_topk_weights", Tensor), ("recv_src_idx", Tensor),
                ("recv_tokens_per_expert", Tensor),
                ("num_recv_tokens_per_expert", ctypes.POINTER(ctypes.c_int32)),
                ("num_local_experts", ctypes.c_int32), ("num_recv_tokens", ctypes.c_int32),
                ("handle", ctypes.c_void_p), ("event", ctypes.c_void_p), ("written", ctypes.c_uint32)]


class CombineArgs(ctypes.Structure):
    _fields_ = [("x", Tensor), ("topk_weights", Tensor), ("handle", ctypes.c_void_p),
                ("bias", Tensor * 2), ("config", Config), ("order", Order), ("out_x", Tensor),
                ("out_topk_weights", Tensor)]


class CombineOut(ctypes.Structure):
    _fields_ = [("combined_x", Tensor), ("combined_topk_weights", Tensor), ("event", ctypes.c_void_p)]


class HandleInfo(ctypes.Structure):
    _fields_ = [("num_tokens", ctypes.c_int32), ("num_ranks", ctypes.c_int32),
                ("hidden", ctypes.c_int32), ("num_recv_tokens", ctypes.c_int32),
                ("num_worst_tokens", ctypes.c_int32), ("rank_prefix_matrix", Tensor),
                ("send_row", Tensor), ("num_nodes", ctypes.c_int32), ("recv_gbl_rank_prefix_sum", Tensor)]


class LLHandle(ctypes.Structure):
    _fields_ = [("src_info", Tensor), ("layout_range", Tensor), ("recv_count", Tensor),
                ("num_max_dispatch_tokens_per_rank", ctypes.c_int32), ("hidden", ctypes.c_int32),
                ("num_experts", ctypes.c_int32), ("num_ranks", ctypes.c_int32), ("num_topk", ctypes.c_int32),
                ("buffer", ctypes.c_int32)]


class LLDispatchArgs(ctypes.Structure):
    _fields_ = [("x", Tensor), ("topk_idx", Tensor), ("num_max_dispatch_tokens_per_rank", ctypes.c_int32),
                ("num_experts", ctypes.c_int32), ("use_fp8", ctypes.c_int32), ("round_scale", ctypes.c_int32),
                ("use_ue8m0", ctypes.c_int32), ("cumulative_local_expert_recv_stats", Tensor),
                ("dispatch_wait_recv_cost_stats", Tensor), ("return_recv_hook", ctypes.c_int32),
                ("num_sms", ctypes.c_int32), ("order", Order)]


class LLDispatchOut(ctypes.Structure):
    _fields_ = [("recv_x", Tensor), ("recv_x_scales", Tensor), ("recv_count", Tensor), ("handle", LLHandle),
                ("hook", ctypes.c_void_p), ("event", ctypes.c_void_p)]


class LLCombineArgs(ctypes.Structure):
    _fields_ = [("x", Tensor), ("topk_idx", Tensor), ("topk_weights", Tensor), ("handle", LLHandle),
                ("zero_copy", ctypes.c_int32), ("use_logfmt", ctypes.c_int32), ("return_recv_hook", ctypes.c_int32),
                ("out", Tensor), ("combine_wait_recv_cost_stats", Tensor), ("num_sms", ctypes.c_int32),
                ("order", Order)]


class LLCombineOut(ctypes.Structure):
    _fields_ = [("combined_x", Tensor), ("hook", ctypes.c_void_p), ("event", ctypes.c_void_p)]


# What epkit_ep_struct_size is asked for when the library loads.
STRUCTS = {"tensor": Tensor, "options": Options, "config": Config, "order": Order, "layout_out": LayoutOut,
           "dispatch_into": DispatchInto, "dispatch_args": DispatchArgs, "dispatch_out": DispatchOut, "combine_args": CombineArgs,
           "combine_out": CombineOut, "handle_info": HandleInfo, "ll_handle": LLHandle,
           "ll_dispatch_args": LLDispatchArgs, "ll_dispatch_out": LLDispatchOut, "ll_combine_args": LLCombineArgs,
           "ll_combine_out": LLCombineOut}

ALL_GATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_void_p)

_P = ctypes.POINTER
_S = ctypes.c_int  # every status-returning entry point
_SIGNATURES = {
    "epkit_ep_abi_version": (ctypes.c_int32, []),
    "epkit_ep_version": (ctypes.c_char_p, []),
    "epkit_ep_last_error": (ctypes.c_char_p, []),
    "epkit_ep_status_name": (ctypes.c_char_p, [ctypes.c_int32]),
    "epkit_ep_struct_size": (ctypes.c_uint64, [ctypes.c_char_p]),
    "epkit_ep_device_count": (_S, [_P(ctypes.c_int32)]),
    "epkit_ep_set_device": (_S, [ctypes.c_int32]),
    "epkit_ep_default_options": (_S, [_P(Options)]),
    "epkit_ep_default_config": (_S, [_P(Config)]),
    "epkit_ep_bytes_needed": (_S, [_P(Options), ctypes.c_int32, _P(ctypes.c_uint64)]),
    "epkit_ep_buffer_create": (_S, [ctypes.c_int32, ctypes.c_int32, ALL_GATHER_FN, ctypes.c_void_p,
                                    _P(Options), _P(ctypes.c_void_p)]),
    "epkit_ep_buffer_destroy": (None, [ctypes.c_void_p]),
    "epkit_ep_buffer_info": (_S, [ctypes.c_void_p, _P(ctypes.c_int32), _P(ctypes.c_int32),
                                  _P(ctypes.c_void_p)]),
    "epkit_ep_buffer_nodes": (_S, [ctypes.c_void_p, _P(ctypes.c_int32), _P(ctypes.c_char_p)]),
    "epkit_ep_layout": (_S, [ctypes.c_void_p, _P(Tensor), ctypes.c_int32, _P(Order), _P(LayoutOut)]),
    "epkit_ep_layout_into": (_S, [ctypes.c_void_p, _P(Tensor), ctypes.c_int32, _P(Order), _P(LayoutOut),
                                  _P(LayoutOut)]),
    "epkit_ep_dispatch": (_S, [ctypes.c_void_p, _P(DispatchArgs), _P(DispatchOut)]),
    "epkit_ep_combine": (_S, [ctypes.c_void_p, _P(CombineArgs), _P(CombineOut)]),
    "epkit_ep_output_arena": (_S, [ctypes.c_void_p, _P(ctypes.c_void_p), _P(ctypes.c_uint64)]),
    "epkit_ep_combine_input": (_S, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, _P(Tensor)]),
    "epkit_ep_barrier": (_S, [ctypes.c_void_p]),
    "epkit_ep_synchronize": (_S, [ctypes.c_void_p]),
    "epkit_ep_copy": (_S, [ctypes.c_void_p, ctypes.c_int32, _P(Tensor), _P(Tensor), _P(Order),
                           _P(ctypes.c_void_p)]),
    "epkit_ep_handle_info_get": (_S, [ctypes.c_void_p, _P(HandleInfo)]),
    "epkit_ep_handle_release": (None, [ctypes.c_void_p]),
    "epkit_ep_ll_size_hint": (_S, [ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                   _P(ctypes.c_uint64)]),
    "epkit_ep_ll_dispatch": (_S, [ctypes.c_void_p, _P(LLDispatchArgs), _P(LLDispatchOut)]),
    "epkit_ep_ll_combine": (_S, [ctypes.c_void_p, _P(LLCombineArgs), _P(LLCombineOut)]),
    "epkit_ep_ll_next_combine_buffer": (_S, [ctypes.c_void_p, _P(LLHandle), _P(Tensor)]),
    "epkit_ep_ll_clean": (_S, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]),
    "epkit_ep_hook_call": (_S, [ctypes.c_void_p]),
    "epkit_ep_hook_release": (None, [ctypes.c_void_p]),
    "epkit_ep_event_record": (_S, [ctypes.c_void_p, _P(ctypes.c_void_p)]),
    "epkit_ep_event_wait": (_S, [ctypes.c_void_p, ctypes.c_void_p]),
    "epkit_ep_event_synchronize": (_S, [ctypes.c_void_p]),
    "epkit_ep_event_destroy": (None, [ctypes.c_void_p]),
}


class EngineError(RuntimeError):
    """A failed engine call; `status` is the C ABI's status name."""

    def __init__(self, status: str, message: str):
        super().__init__(f"epkit engine ({status}): {message}")
        self.status = status


def candidates() -> List[pathlib.Path]:
    """Where the library is looked for, in order."""
    here = pathlib.Path(__file__).resolve().parent
    found = []
    env = os.environ.get("EPKIT_LIBRARY")
    if env:
        found.append(pathlib.Path(env))
    found += [here / "lib" / LIBRARY_NAME, here / LIBRARY_NAME]
    # A source checkout: python/epkit -> <repo>/build/lib.
    found.append(here.parent.parent / "build" / "lib" / LIBRARY_NAME)
    return found


class Library:
    """The loaded C ABI with typed entry points."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        # Global: the compiled extension (epkit._C) resolves the C ABI's
        # symbols from this copy of the library instead of linking its own.
        self.lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
            short = name[len("epkit_ep_"):]
            if not hasattr(type(self), short):  # last_error stays the decoding method
                setattr(self, short, fn)
        abi = self.abi_version()
        if abi != ABI_VERSION:
            raise ImportError(f"{path} has C ABI version {abi}; this package needs {ABI_VERSION}")
        for name, struct in STRUCTS.items():
            size = self.struct_size(name.encode())
            if size != ctypes.sizeof(struct):
                raise ImportError(f"{path}: epkit_ep_{name} is {size} bytes there and {ctypes.sizeof(struct)} "
                                  "in this package (built from another ep_c.h)")

    def last_error(self) -> str:
        return (self.lib.epkit_ep_last_error() or b"").decode(errors="replace")

    def check(self, status: int) -> None:
        if status != OK:
            name = self.status_name(status).decode()
            raise EngineError(name, self.last_error())


_library: Optional[Library] = None
_load_error: Optional[str] = None


def load() -> Library:
    """The library, loaded once; ImportError naming every place tried."""
    global _library, _load_error
    if _library is not None:
        return _library
    if _load_error is not None:
        raise ImportError(_load_error)
    tried = []
    for path in candidates():
        if not path.is_file():
            tried.append(f"{path} (absent)")
            continue
        try:
            _library = Library(path)
            return _library
        except (OSError, ImportError, AttributeError) as e:
            tried.append(f"{path} ({e})")
    _load_error = ("epkit's engine library (libepkit_ep.so, built by the CUDA build) was not found: "
                   "set EPKIT_LIBRARY to its path. Tried: " + "; ".join(tried))
    raise ImportError(_load_error)


def tensor(data: int, dtype: int, shape, strides) -> Tensor:
    t = Tensor()
    t.data = data
    t.dtype = dtype
    t.ndim = len(shape)
    for i, (n, s) in enumerate(zip(shape, strides)):
        t.shape[i] = n
        t.strides[i] = s
    return t
