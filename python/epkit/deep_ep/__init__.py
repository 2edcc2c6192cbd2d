"""DeepEP V1's Python API (deep_ep at commit 29d31c0) over epkit's engine.

Replace `import deep_ep` with `import epkit.deep_ep as deep_ep`. Normal
mode (layout, dispatch, cached dispatch, combine) is supported on one node
(1-8 ranks) and across nodes (nodes of up to 8 ranks, the network leg over
NCCL: internode_dispatch / internode_combine). Low-latency mode
(low_latency_dispatch / low_latency_combine, CUDA-graph capturable) is
supported on one node; across nodes, and the features not built (shrink
mode, fabric memory, the LogFMT combine, the mask-buffer calls), raise
NotImplementedError naming the feature. DeepEP V2's ElasticBuffer (commit
dd758ca: dispatch and combine) is built on Buffer (elastic.py). Importing
needs no PyTorch; `topk_idx_t`, Buffer and ElasticBuffer do.
"""

from ._checks import EPAssertionError
from ._events import Config, EventHandle, EventOverlap
from .buffer import Buffer, DispatchHandle
from .elastic import ElasticBuffer, ElasticEventOverlap, EPHandle

__all__ = ["Buffer", "Config", "EventOverlap", "EventHandle", "DispatchHandle", "EPAssertionError",
           "ElasticBuffer", "ElasticEventOverlap", "EPHandle", "topk_idx_t"]


def __getattr__(name):
    # DeepEP's topk_idx_t is torch.int64; resolved on first use so that the
    # module imports without PyTorch.
    if name == "topk_idx_t":
        try:
            import torch
        except ImportError as e:
            raise AttributeError(f"epkit.deep_ep.topk_idx_t needs PyTorch ({e})") from e
        return torch.int64
    raise AttributeError(f"module 'epkit.deep_ep' has no attribute {name!r}")
