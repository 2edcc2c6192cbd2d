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


if __name__ == "__main__":
    unittest.main()
