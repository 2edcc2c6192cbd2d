"""Test-only (never part of the product): the `deep_ep` package that DeepEP
V2's tests import their pure-Python helpers from (`deep_ep.utils`).

The test itself uses epkit (its `import deep_ep` changed to
`import epkit.deep_ep as deep_ep`); its `from deep_ep.utils... import`
lines land here. This package's path ends with a DeepEP snapshot's
deep_ep/ folder ($EPKIT_DEEPEP_V2_DIR/deep_ep, from `git archive dd758ca
deep_ep/utils`), so `deep_ep.utils` is DeepEP's own code, unchanged.
DeepEP's C extension does not exist here: `deep_ep._C` is a stand-in whose
every use raises (the helpers the test calls do not use it).
"""

import os

_root = os.environ.get("EPKIT_DEEPEP_V2_DIR", "")
_utils = os.path.join(_root, "deep_ep", "utils", "__init__.py")
if not _root or not os.path.isfile(_utils):
    raise ImportError("the V2 test shim needs EPKIT_DEEPEP_V2_DIR, a DeepEP snapshot holding "
                      f"deep_ep/utils/ (not found: {_utils!r})")
__path__.append(os.path.join(_root, "deep_ep"))
