"""epkit's version. Its one source is CMake's project version
(`project(epkit VERSION x.y.z ...)` in the checkout's CMakeLists.txt), which
the C++ libraries and the binary report as EPKIT_VERSION.

A wheel or sdist carries it in epkit/_version_built.py, which the build
backend (python/_build/epkit_backend.py) writes; a source checkout
(PYTHONPATH=python) reads CMakeLists.txt. tests/meta/version_test.cc checks
that no other file writes a version of its own.
"""

import pathlib
import re

_PROJECT = re.compile(r"project\(\s*epkit\s+VERSION\s+([0-9]+(?:\.[0-9]+){0,3})\b")


def from_cmake(text):
    """The version a CMakeLists.txt's text declares, or None."""
    found = _PROJECT.search(text)
    return found.group(1) if found else None


def checkout_version(root):
    """The version of the checkout at `root` (the folder of its top
    CMakeLists.txt), or None where there is none."""
    try:
        with open(pathlib.Path(root) / "CMakeLists.txt", encoding="utf-8", errors="replace") as f:
            return from_cmake(f.read(1 << 16))  # the project() line is near the top
    except OSError:
        return None


def version():
    """The built package's version, else its checkout's, else "0+unknown"."""
    try:
        from ._version_built import VERSION
        return VERSION
    except ImportError:
        pass
    return checkout_version(pathlib.Path(__file__).resolve().parents[2]) or "0+unknown"
