"""The record of how an output was made, stored with it so the projection can be reproduced."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import __version__, spec


def projection_metadata(*, seed: int, out_features: int, nnz: int, input_path: Path,
                        input_shape: tuple, input_dtype: np.dtype, output_dtype: np.dtype,
                        column: str | None) -> dict:
    """Everything needed to regenerate S and to check an output against its input."""
    return {
        "sjlt_version": __version__,
        "spec_version": spec.SPEC_VERSION,
        "seed": seed,
        "out_features": out_features,
        "nnz": nnz,
        "input": Path(input_path).name,
        "input_shape": list(input_shape),
        "input_dtype": np.dtype(input_dtype).name,
        "output_dtype": np.dtype(output_dtype).name,
        "column": column,
    }
