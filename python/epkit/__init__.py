"""epkit: expert-parallel (MoE) GPU communication.

`epkit.deep_ep` is a DeepEP-compatible API (deep_ep.Buffer and friends at
DeepEP V1 commit 29d31c0) over epkit's engine. Importing needs neither
PyTorch nor a GPU; `epkit.why_unavailable()` says what is missing.
"""

from ._version import version as _version

# CMake's project version (the one source): see _version.py.
__version__ = _version()


def library_path():
    """Path of the loaded libepkit_ep.so (loads it; ImportError if absent)."""
    from . import _native
    return _native.load().path


def why_unavailable():
    """None when the engine can run here, else the reason (no library, no
    PyTorch, no CUDA device), in words."""
    from . import _native
    try:
        lib = _native.load()
    except ImportError as e:
        return str(e)
    try:
        import torch  # noqa: F401
    except ImportError as e:
        return f"epkit.deep_ep needs PyTorch, which is not importable here ({e})"
    count = _native.ctypes.c_int32(0)
    if lib.device_count(_native.ctypes.byref(count)) != _native.OK:
        return lib.last_error()
    return None
