"""sjlt: seeded sparse Johnson-Lindenstrauss projections and seeded dropout.

The same seed gives the same projection matrix and the same dropout mask on every device; see
``docs/spec.md`` for the exact streams.

``import sjlt`` is cheap: it imports neither torch nor scikit-learn. Each public name below is
imported on first use (PEP 562), so the command line starts without torch and ``import sjlt``
never pulls in scikit-learn.
"""

from __future__ import annotations

from ._lazy import lazy_names
from ._version import __version__
from .spec import SPEC_VERSION

# public name -> the submodule that defines it (a submodule itself when the name is the module).
_LAZY = {
    "functional": "sjlt.functional",
    "nn": "sjlt.nn",
    "reference": "sjlt.reference",
    "backends": "sjlt.backends",
    "sparse_jl": "sjlt.functional",
    "sparse_jl_blocks": "sjlt.functional",
    "sparse_jl_transpose": "sjlt.functional",
    "sparse_jl_matrix": "sjlt.functional",
    "seeded_dropout": "sjlt.functional",
    "SparseJL": "sjlt.nn",
    "SeededDropout": "sjlt.nn",
    "SparseJLProjection": "sjlt.sklearn",
    "FeatureDropout": "sjlt.sklearn",
    "attribution": "sjlt.attribution",
    # GraSS's class name and signature, which dattri's proj_type="sjlt" imports.
    "SJLTProjection": "sjlt.attribution",
}

__all__ = ["SPEC_VERSION", "__version__", *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
