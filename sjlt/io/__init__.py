"""The file-projection layer: streaming ``.npy`` and parquet files of embeddings through the
sparse JL projection, below the command line (``sjlt project``), Dask and scikit-learn.

    from sjlt.io import Settings, project_file, read_provenance
    project_file("embeddings.parquet", "projected.parquet", Settings(out_features=128, seed=0))
    read_provenance("projected.parquet")  # {"seed": 0, "out_features": 128, ...}

Modules, lowest first: :mod:`.errors`, :mod:`.signals` (SIGINT/SIGTERM as an exception, and
blocks they must not cut), :mod:`.provenance` (the record every output carries, and how sjlt
recognises its own files), :mod:`.atomic` (outputs that appear whole or not at all),
:mod:`.arrow`, :mod:`.npy`, :mod:`.parquet`, :mod:`.formats` (readers and writers),
:mod:`.pipeline` (read-ahead and write-behind threads), :mod:`.rows` (the one host<->device
pipeline, also behind scikit-learn's dense inputs), :mod:`.blocks` (the same for dask arrays),
:mod:`.project` (one file, with its size checks) and :mod:`.cluster` (many files on a Dask
cluster). Problems the caller can fix raise :class:`FileProjectionError`.

Importing this package is cheap (no numpy, no torch): each public name is imported on first use.
"""

from __future__ import annotations

from .._lazy import lazy_names
from .errors import FileProjectionError, Interrupted

# public name -> the submodule that defines it
_LAZY = {
    "Settings": "sjlt.io.project",
    "FileResult": "sjlt.io.project",
    "project_file": "sjlt.io.project",
    "plan_outputs": "sjlt.io.project",
    "project_on_cluster": "sjlt.io.cluster",
    "read_provenance": "sjlt.io.provenance",
    "written_by_sjlt": "sjlt.io.provenance",
    "atomic_outputs": "sjlt.io.atomic",
    "open_source": "sjlt.io.formats",
    "expand_inputs": "sjlt.io.formats",
    "project_rows": "sjlt.io.rows",
    "DeviceStream": "sjlt.io.rows",
}

__all__ = ["FileProjectionError", "Interrupted", *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
