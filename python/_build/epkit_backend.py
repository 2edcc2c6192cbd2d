"""A PEP 517 build backend for the epkit package using the standard library
only: `pip install ./python` then works offline with neither setuptools nor
wheel installed (`--no-build-isolation` or not, as nothing is required).

The wheel holds the pure-Python package, the extension's source and the C
ABI header (epkit/csrc/, epkit/include/: epkit._C can be compiled where it
runs), and libepkit_ep.so as epkit/lib/libepkit_ep.so: $EPKIT_LIBRARY when
set, else ../build/lib/ of the README's build, else one built here with CMake
from the checkout this folder sits in (the CUDA toolkit and the packages of
`scripts/setup.sh doctor` needed). When PyTorch is importable by the build
(`pip install --no-build-isolation ./python`), epkit._C is compiled against it
and shipped too; otherwise it is compiled on first use (docs/python.md).
"""

import base64
import importlib.util
import hashlib
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent.parent


def _project_version():
    """CMake's project version of the checkout around this folder (the one
    source, read by epkit/_version.py's rule); in an sdist, which has no
    CMakeLists.txt, the epkit/_version_built.py it carries."""
    spec = importlib.util.spec_from_file_location("_epkit_version", HERE / "epkit" / "_version.py")
    rules = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rules)
    found = rules.checkout_version(HERE.parent)
    if found:
        return found
    built = HERE / "epkit" / "_version_built.py"
    if built.is_file():
        # Written by build_sdist below; read as data, never run.
        found = re.fullmatch(r'VERSION = "([0-9]+(?:\.[0-9]+){0,3})"\n', built.read_text(encoding="utf-8"))
        if found:
            return found.group(1)
    raise RuntimeError(f"epkit: no version: neither {HERE.parent / 'CMakeLists.txt'} nor {built}")


NAME, VERSION = "epkit", _project_version()
VERSION_FILE = f'VERSION = "{VERSION}"\n'.encode()
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: DeepEP-compatible expert-parallel dispatch/combine for PyTorch over epkit's engine
Requires-Python: >=3.9
"""


def _library(scratch: pathlib.Path):
    """libepkit_ep.so: given, found in the README's build, or built now."""
    given = os.environ.get("EPKIT_LIBRARY")
    if given:
        if not pathlib.Path(given).is_file():
            raise RuntimeError(f"EPKIT_LIBRARY={given!r} is not a file")
        return pathlib.Path(given)
    built = HERE.parent / "build" / "lib" / "libepkit_ep.so"
    if built.is_file():
        return built
    return _build_library(scratch)


def _build_library(scratch: pathlib.Path):
    """Builds the engine's C ABI with CMake from the checkout around this
    folder; None (a wheel without the engine) where there is no checkout,
    CMake or CUDA toolkit, saying why on stderr."""
    root = HERE.parent
    if not (root / "CMakeLists.txt").is_file() or not (root / "include" / "epkit" / "ep_c.h").is_file():
        print("epkit: no libepkit_ep.so given and no epkit checkout to build it from; "
              "set EPKIT_LIBRARY", file=sys.stderr)
        return None
    cmake = shutil.which("cmake")
    if cmake is None:
        print("epkit: cmake is not installed; the wheel holds no engine (set EPKIT_LIBRARY)", file=sys.stderr)
        return None
    build = scratch / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    arches = os.environ.get("CUDAARCHS")
    configure = [cmake, "-S", str(root), "-B", str(build), *generator, "-DCMAKE_BUILD_TYPE=Release",
                 "-DBUILD_TESTING=OFF"] + ([f"-DCMAKE_CUDA_ARCHITECTURES={arches}"] if arches else [])
    jobs = str(os.cpu_count() or 2)
    for step in (configure, [cmake, "--build", str(build), "-j", jobs, "--target", "epkit_ep_c"]):
        done = subprocess.run(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise RuntimeError("epkit: building libepkit_ep.so failed:\n" + done.stdout[-4000:])
    library = build / "lib" / "libepkit_ep.so"
    if not library.is_file():
        raise RuntimeError("epkit: the build made no lib/libepkit_ep.so (a build without CUDA?); "
                           "install the CUDA toolkit or set EPKIT_LIBRARY")
    return library


def _extension(library: pathlib.Path, scratch: pathlib.Path):
    """epkit._C compiled against the PyTorch this build can import, else
    None (it is then compiled on first use)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, EPKIT_LIBRARY=str(library), PYTHONPATH=path)
    out = scratch / "ext"
    done = subprocess.run([sys.executable, "-m", "epkit._build_ext", "--out", str(out), "--include",
                           str(HERE.parent / "include")], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        print("epkit: the extension was not built here (it is compiled on first use):\n" + done.stdout[-2000:],
              file=sys.stderr)
        return None
    return out / "_C.so"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _sources():
    """The package's files: Python, the extension's source, and the C ABI
    header from the checkout (the extension includes it)."""
    files = {}
    for pattern in ("*.py", "*.cc", "*.h"):
        for path in sorted((HERE / "epkit").rglob(pattern)):
            files[path.relative_to(HERE).as_posix()] = path.read_bytes()
    header = HERE.parent / "include" / "epkit" / "ep_c.h"
    if header.is_file():
        files["epkit/include/epkit/ep_c.h"] = header.read_bytes()
    files["epkit/_version_built.py"] = VERSION_FILE
    return files


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = _sources()
    tag = "py3-none-any"
    with tempfile.TemporaryDirectory(prefix="epkit-wheel-") as scratch:
        library = _library(pathlib.Path(scratch))
        if library is not None:
            files["epkit/lib/libepkit_ep.so"] = library.read_bytes()
            tag = f"py3-none-linux_{platform.machine()}"
            extension = _extension(library, pathlib.Path(scratch))
            if extension is not None:
                files["epkit/_C.so"] = extension.read_bytes()
    info = f"{NAME}-{VERSION}.dist-info"
    files[f"{info}/METADATA"] = METADATA.encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: epkit_backend\nRoot-Is-Purelib: true\nTag: {tag}\n").encode()
    records = [_record_line(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(records) + "\n").encode()
    name = f"{NAME}-{VERSION}-{tag}.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            info_ = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info_.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            z.writestr(info_, data, zipfile.ZIP_DEFLATED)
    return name


def build_sdist(sdist_directory, config_settings=None):
    import tarfile
    name = f"{NAME}-{VERSION}"
    with tarfile.open(pathlib.Path(sdist_directory) / f"{name}.tar.gz", "w:gz") as tar:
        for rel in ["pyproject.toml", "_build/epkit_backend.py"] + [
                p.relative_to(HERE).as_posix() for pattern in ("*.py", "*.cc", "*.h")
                for p in sorted((HERE / "epkit").rglob(pattern))]:
            tar.add(HERE / rel, arcname=f"{name}/{rel}")
        import io
        for rel, data in (("PKG-INFO", METADATA.encode()), ("epkit/_version_built.py", VERSION_FILE)):
            member = tarfile.TarInfo(f"{name}/{rel}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return f"{name}.tar.gz"
