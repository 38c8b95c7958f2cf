"""sjlt: seeded sparse Johnson-Lindenstrauss projections and seeded dropout.

The same seed gives the same projection matrix and the same dropout mask on every device; see
``docs/spec.md`` for the exact streams.
"""
from . import functional, nn, reference
from .functional import seeded_dropout, sparse_jl, sparse_jl_matrix, sparse_jl_transpose
from .nn import SeededDropout, SparseJL
from .spec import SPEC_VERSION

__version__ = "0.1.0"

__all__ = [
    "SPEC_VERSION", "__version__", "functional", "nn", "reference",
    "sparse_jl", "sparse_jl_transpose", "sparse_jl_matrix", "seeded_dropout",
    "SparseJL", "SeededDropout",
]
