"""Builds epkit._C, the per-call path of epkit.deep_ep (csrc/torch_ext.cc),
against the PyTorch installed here.

    python -m epkit._build_ext [--out DIR] [--include DIR]

Used by the package's build backend at `pip install` time when PyTorch is
importable, and by the device scripts for an in-tree run. The extension takes
the engine's C ABI from libepkit_ep.so, which must load first (it is found as
epkit._native finds it: EPKIT_LIBRARY, the package's lib/, a build/ folder).
Without the extension epkit.deep_ep runs on ctypes (docs/python.md).
"""

import argparse
import fcntl
import hashlib
import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "csrc" / "torch_ext.cc"


def default_include() -> pathlib.Path:
    """include/epkit/ep_c.h: beside the package when installed, the
    repository's include/ in a checkout."""
    for candidate in (HERE / "include", HERE.parent.parent / "include"):
        if (candidate / "epkit" / "ep_c.h").is_file():
            return candidate
    raise FileNotFoundError("epkit/ep_c.h was not found beside the package or in the checkout")


def build(out_dir: pathlib.Path, include_dir: pathlib.Path, verbose: bool = False) -> pathlib.Path:
    """Compiles the extension and copies it to out_dir/_C.so; returns that path."""
    from torch.utils import cpp_extension

    from . import _native

    # load() dlopens what it built (not as a Python module: the copy is what
    # gets imported); the C ABI's symbols resolve from the library loaded here.
    _native.load()
    with tempfile.TemporaryDirectory(prefix="epkit-ext-") as scratch:
        cpp_extension.load(name="_C", sources=[str(SOURCE)], extra_include_paths=[str(include_dir)],
                           build_directory=scratch, with_cuda=True, verbose=verbose,
                           extra_cflags=["-O2"], is_python_module=False)
        built = pathlib.Path(scratch) / "_C.so"
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / "_C.so"
        shutil.copyfile(built, target)
    return target


def compiled_on_first_use():
    """epkit._C from a per-user cache, compiled there the first time (a
    package installed without PyTorch at hand). Keyed by the PyTorch version
    and the sources, so an upgrade of either compiles anew; ranks of one
    node starting together wait for one build (a file lock)."""
    import torch

    include = default_include()
    sources = b"".join(p.read_bytes() for p in sorted((HERE / "csrc").iterdir()) if p.suffix in (".cc", ".h"))
    digest = hashlib.sha256(sources + (include / "epkit" / "ep_c.h").read_bytes()).hexdigest()[:16]
    root = pathlib.Path(os.environ.get("EPKIT_CACHE") or pathlib.Path.home() / ".cache" / "epkit")
    folder = root / f"ext-torch{torch.__version__}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "_C.so"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            print(f"epkit: compiling epkit._C for PyTorch {torch.__version__} into {folder} (once)",
                  file=sys.stderr)
            build(folder, include)
    spec = importlib.util.spec_from_file_location("epkit._C", target)
    if spec is None or spec.loader is None:
        raise ImportError(f"{target} is not a loadable extension")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["epkit._C"] = module
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE, help="where _C.so goes (default: the package)")
    parser.add_argument("--include", type=pathlib.Path, default=None, help="the folder holding epkit/ep_c.h")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        path = build(args.out, args.include or default_include(), args.verbose)
    except Exception as e:  # noqa: BLE001 - reported, the exit code says it failed
        print(f"epkit: building the extension failed: {e}", file=sys.stderr)
        return 1
    print(f"epkit: built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
