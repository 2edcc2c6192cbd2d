"""The package's build backend (python/_build/epkit_backend.py) on a machine
without PyTorch: the wheel carries the engine it is given, the extension's
source and the C ABI header (so epkit._C can be compiled where it runs), and a
wrong EPKIT_LIBRARY is an error naming it."""

import os
import pathlib
import sys
import tempfile
import unittest
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
PYTHON = HERE.parent.parent / "python"
sys.path.insert(0, str(PYTHON / "_build"))

import epkit_backend  # noqa: E402


class Wheel(unittest.TestCase):
    def build(self, library):
        old = os.environ.get("EPKIT_LIBRARY")
        os.environ["EPKIT_LIBRARY"] = str(library)
        try:
            with tempfile.TemporaryDirectory() as out:
                name = epkit_backend.build_wheel(out)
                with zipfile.ZipFile(pathlib.Path(out) / name) as z:
                    return name, {i.filename: z.read(i) for i in z.infolist()}
        finally:
            if old is None:
                del os.environ["EPKIT_LIBRARY"]
            else:
                os.environ["EPKIT_LIBRARY"] = old

    def test_wheel_holds_engine_extension_source_and_header(self):
        with tempfile.TemporaryDirectory() as d:
            lib = pathlib.Path(d) / "libepkit_ep.so"
            lib.write_bytes(b"\x7fELF stand-in")
            name, files = self.build(lib)
        self.assertIn("linux_", name)
        self.assertEqual(files["epkit/lib/libepkit_ep.so"], b"\x7fELF stand-in")
        self.assertIn("PYBIND11_MODULE(_C", files["epkit/csrc/torch_ext.cc"].decode())
        self.assertIn("class OutputArena", files["epkit/csrc/arena.h"].decode())
        self.assertIn("EPKIT_EP_ABI_VERSION", files["epkit/include/epkit/ep_c.h"].decode())
        for module in ("epkit/__init__.py", "epkit/_native.py", "epkit/_build_ext.py",
                       "epkit/deep_ep/buffer.py"):
            self.assertIn(module, files)
        record = files[next(f for f in files if f.endswith("RECORD"))].decode()
        self.assertIn("epkit/csrc/torch_ext.cc,sha256=", record)

    def test_missing_library_is_named(self):
        with self.assertRaisesRegex(RuntimeError, "EPKIT_LIBRARY=.*no-such-lib.so.* is not a file"):
            self.build("/nonexistent/no-such-lib.so")


class Version(unittest.TestCase):
    """CMake's project version is the one source: the wheel's metadata, the
    package's __version__ and an sdist (which has no CMakeLists.txt) all
    carry it."""

    def cmake_version(self):
        import re
        text = (PYTHON.parent / "CMakeLists.txt").read_text()
        return re.search(r"project\(epkit VERSION ([0-9.]+)", text).group(1)

    def test_wheel_and_package_say_cmakes_version(self):
        want = self.cmake_version()
        self.assertEqual(epkit_backend.VERSION, want)
        with tempfile.TemporaryDirectory() as d:
            lib = pathlib.Path(d) / "libepkit_ep.so"
            lib.write_bytes(b"\x7fELF stand-in")
            name, files = Wheel.build(self, lib)
        self.assertIn(f"epkit-{want}-", name)
        self.assertIn(f"Version: {want}\n", files[f"epkit-{want}.dist-info/METADATA"].decode())
        self.assertEqual(files["epkit/_version_built.py"].decode(), f'VERSION = "{want}"\n')
        sys.path.insert(0, str(PYTHON))
        try:
            import epkit
            self.assertEqual(epkit.__version__, want)
        finally:
            sys.path.remove(str(PYTHON))

    def test_sdist_carries_the_version_it_was_made_with(self):
        import importlib.util
        import tarfile
        want = self.cmake_version()
        with tempfile.TemporaryDirectory() as d:
            name = epkit_backend.build_sdist(d)
            with tarfile.open(pathlib.Path(d) / name) as tar:
                tar.extractall(d, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(d)
            root = pathlib.Path(d) / f"epkit-{want}"
            self.assertFalse((root / "CMakeLists.txt").exists())
            spec = importlib.util.spec_from_file_location("sdist_backend", root / "_build" / "epkit_backend.py")
            backend = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(backend)
            self.assertEqual(backend.VERSION, want)


if __name__ == "__main__":
    unittest.main()
