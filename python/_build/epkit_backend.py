"""A PEP 517 build backend for the epkit package using the standard library
only: `pip install ./python` then works offline with neither setuptools nor
wheel installed (`--no-build-isolation` or not, as nothing is required).

The wheel holds the pure-Python package and, when one is at hand,
libepkit_ep.so (from $EPKIT_LIBRARY, else ../build/lib/ of the README's build)
as epkit/lib/libepkit_ep.so.
"""

import base64
import hashlib
import os
import pathlib
import platform
import zipfile

NAME, VERSION = "epkit", "0.1.0"
HERE = pathlib.Path(__file__).resolve().parent.parent
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: DeepEP-compatible expert-parallel dispatch/combine for PyTorch over epkit's engine
Requires-Python: >=3.9
"""


def _library():
    for candidate in (os.environ.get("EPKIT_LIBRARY"), HERE.parent / "build" / "lib" / "libepkit_ep.so"):
        if candidate and pathlib.Path(candidate).is_file():
            return pathlib.Path(candidate)
    return None


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    for path in sorted((HERE / "epkit").rglob("*.py")):
        files[path.relative_to(HERE).as_posix()] = path.read_bytes()
    library = _library()
    tag = "py3-none-any"
    if library is not None:
        files["epkit/lib/libepkit_ep.so"] = library.read_bytes()
        tag = f"py3-none-linux_{platform.machine()}"
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
                p.relative_to(HERE).as_posix() for p in sorted((HERE / "epkit").rglob("*.py"))]:
            tar.add(HERE / rel, arcname=f"{name}/{rel}")
        data = METADATA.encode()
        pkg_info = tarfile.TarInfo(f"{name}/PKG-INFO")
        pkg_info.size = len(data)
        import io
        tar.addfile(pkg_info, io.BytesIO(data))
    return f"{name}.tar.gz"
