"""Config, EventHandle and EventOverlap: DeepEP's small value types."""

from typing import Any, Optional, Tuple

from .. import _native
from ._checks import require


def _align_up(a: int, b: int) -> int:
    return (a + b - 1) // b * b


class Config:
    """DeepEP's kernel config. The chunk sizes are checked as DeepEP checks
    them; epkit's kernels have their own knobs (`num_warps`, `nvl_chunk`:
    16-byte vectors in flight per lane, 1/2/4/8), set as attributes."""

    def __init__(self, num_sms: int = 20, num_max_nvl_chunked_send_tokens: int = 6,
                 num_max_nvl_chunked_recv_tokens: int = 256, num_max_rdma_chunked_send_tokens: int = 6,
                 num_max_rdma_chunked_recv_tokens: int = 256):
        require(num_sms >= 0, "Config: num_sms must be >= 0")
        require(num_max_nvl_chunked_send_tokens > 0 and num_max_nvl_chunked_recv_tokens > 0,
                "Config: NVL chunk sizes must be positive")
        require(num_max_nvl_chunked_send_tokens < num_max_nvl_chunked_recv_tokens,
                "Config: the NVL send chunk must be smaller than the receive chunk")
        require(num_max_rdma_chunked_send_tokens > 0 and num_max_rdma_chunked_recv_tokens > 0,
                "Config: RDMA chunk sizes must be positive")
        num_max_rdma_chunked_recv_tokens = _align_up(num_max_rdma_chunked_recv_tokens,
                                                     num_max_rdma_chunked_send_tokens)
        require(num_max_rdma_chunked_send_tokens < num_max_rdma_chunked_recv_tokens,
                "Config: the RDMA send chunk must be smaller than the receive chunk")
        require(num_max_rdma_chunked_send_tokens <= num_max_rdma_chunked_recv_tokens // 2,
                "Config: the RDMA send chunk must be at most half the receive chunk")
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens
        self.num_warps = 32
        self.nvl_chunk = 4
        self._native = None

    def native(self) -> _native.Config:
        """The engine's config, rebuilt only when a field changed (it is
        taken on every call)."""
        key = (self.num_sms, self.num_warps, self.nvl_chunk)
        if self._native is None or self._native[0] != key:
            self._native = (key, _native.Config(*key))
        return self._native[1]

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes of a Buffer for 4096 tokens of `hidden_bytes` BF16 bytes, top-8."""
        require(1 <= num_ranks <= 8, "epkit's intranode Buffer spans 1 to 8 ranks")
        lib = _native.load()
        o = _native.Options()
        lib.check(lib.default_options(_native.ctypes.byref(o)))
        o.max_hidden = _align_up(max(hidden_bytes // 2, 1), 128)
        out = _native.ctypes.c_uint64()
        lib.check(lib.bytes_needed(_native.ctypes.byref(o), num_ranks, _native.ctypes.byref(out)))
        return int(out.value)

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        if num_ranks <= 8:
            return 0
        raise NotImplementedError("epkit: internode (RDMA) buffers are not implemented yet")

    def __repr__(self) -> str:
        return (f"Config(num_sms={self.num_sms}, nvl=({self.num_max_nvl_chunked_send_tokens}, "
                f"{self.num_max_nvl_chunked_recv_tokens}), rdma=({self.num_max_rdma_chunked_send_tokens}, "
                f"{self.num_max_rdma_chunked_recv_tokens}), num_warps={self.num_warps}, nvl_chunk={self.nvl_chunk})")


def _current_stream() -> int:
    """The current device's current CUDA stream, as a pointer. torch's raw
    getter is one C call; torch.cuda.current_stream() builds a Stream object
    and looks the device up through Python, which was a fifth of a small
    dispatch's host time."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(torch._C._cuda_getDevice())
    return torch.cuda.current_stream().cuda_stream


class EventHandle:
    """A CUDA event owned by Python; made on the current stream when no
    event is given (DeepEP's EventHandle())."""

    __slots__ = ("ptr", "_lib")

    def __init__(self, ptr: Optional[int] = None):
        self._lib = _native.load()
        if ptr is None:
            out = _native.ctypes.c_void_p()
            self._lib.check(self._lib.event_record(_current_stream(), _native.ctypes.byref(out)))
            ptr = out.value
        self.ptr = ptr

    def current_stream_wait(self) -> None:
        self._lib.check(self._lib.event_wait(self.ptr, _current_stream()))

    def synchronize(self) -> None:
        self._lib.check(self._lib.event_synchronize(self.ptr))

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr:
            try:
                self._lib.event_destroy(ptr)
            except Exception:  # interpreter shutdown
                pass


class EventOverlap:
    """DeepEP's EventOverlap: an optional event plus tensors to keep alive."""

    # Defaults on the class: epkit._C makes one without an event without
    # calling __init__ (host cost of a low-latency call).
    event: Optional["EventHandle"] = None
    extra_tensors: Optional[Tuple[Any, ...]] = None

    def __init__(self, event: Optional[EventHandle] = None,
                 extra_tensors: Optional[Tuple[Any, ...]] = None) -> None:
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        assert self.event is not None
        self.event.current_stream_wait()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if self.event is not None:
            self.event.current_stream_wait()
