"""Test-only stand-in for DeepEP's C extension: importable (DeepEP's
helpers import it at module level), unusable."""


class _Missing:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("DeepEP's C extension is not here (epkit's V2 test shim)")


EventHandle = _Missing


def __getattr__(name):
    # AttributeError: the import machinery probes attributes with hasattr().
    raise AttributeError(f"deep_ep._C.{name}: DeepEP's C extension is not here (epkit's V2 test shim)")
