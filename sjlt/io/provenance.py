"""The record of how an output was made, stored with it so the projection can be reproduced,
and how sjlt recognises a file it wrote itself (the overwrite rule: :mod:`.atomic`).

Every file sjlt writes carries a record:

* a ``.npy`` projection: the JSON sidecar ``OUTPUT.json`` (:func:`projection_metadata`), whose
  ``input_shape``, ``out_features`` and ``output_dtype`` must match the array's header;
* a parquet projection: the same record under the schema metadata key ``sjlt``;
* the ``sjlt evaluate --json`` table: ``"written_by": "sjlt evaluate"`` in the JSON;
* the ``sjlt evaluate --plot`` figure: :data:`PLOT_MARK` in the image's metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import __version__, spec
from .errors import FileProjectionError

#: Written into the metadata of every figure of ``sjlt evaluate --plot`` (PNG "Software",
#: SVG/PDF "Creator"), and looked for when deciding whether --overwrite may replace one.
PLOT_MARK = f"sjlt evaluate {__version__}"
PLOT_FORMATS = ("png", "svg", "pdf")
EVALUATE_WRITER = "sjlt evaluate"
#: Schema metadata key under which a parquet projection records its settings.
PARQUET_METADATA_KEY = b"sjlt"
_PROJECTION_KEYS = {"sjlt_version", "spec_version", "seed", "out_features", "nnz", "input_shape", "output_dtype"}
_MARK_WINDOW = 1 << 16  # the metadata of our figures lies in the first or last 64 KiB
_MAX_RECORD_BYTES = 1 << 20


def projection_metadata(
    *,
    seed: int,
    out_features: int,
    nnz: int,
    input_path: Path,
    input_shape: tuple,
    input_dtype,
    output_dtype,
    column: str | None,
) -> dict:
    """Everything needed to regenerate S and to check an output against its input."""
    import numpy as np

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


def is_projection_record(record) -> bool:
    return isinstance(record, dict) and _PROJECTION_KEYS <= record.keys()


def _read_json(path: Path):
    if path.stat().st_size > _MAX_RECORD_BYTES:
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _npy_matches_record(path: Path, record) -> bool:
    """The array's header has the shape and dtype its sidecar says sjlt wrote."""
    import numpy as np
    import numpy.lib.format as npy_format

    if not is_projection_record(record):
        return False
    with open(path, "rb") as f:
        version = npy_format.read_magic(f)
        read = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
        shape, _, dtype = read(f)
    want = tuple(record["input_shape"][:-1]) + (record["out_features"],)
    return tuple(shape) == want and np.dtype(dtype).newbyteorder("=").name == record["output_dtype"]


def _parquet_record(path: Path):
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(PARQUET_METADATA_KEY)
    return None if raw is None else json.loads(raw)


def read_provenance(path, *, current_spec: bool = True) -> dict | None:
    """The projection record of a ``.npy`` (from its sidecar ``PATH.json``) or parquet output, or
    None when it has none. Raises OSError (or pyarrow's error) for an unreadable file, and with
    ``current_spec`` (the default) FileProjectionError for an output made under a stream spec
    version whose matrix this sjlt no longer reproduces (spec.sparse_jl_same_since)."""
    path = Path(path)
    if path.name.lower().endswith(".npy"):
        sidecar = path.with_name(path.name + ".json")
        if not sidecar.is_file():
            return None
        record = _read_json(sidecar)
    else:
        record = _parquet_record(path)
    if not is_projection_record(record):
        return None
    if current_spec and record["spec_version"] not in spec.sparse_jl_same_since(record["out_features"], record["nnz"]):
        raise FileProjectionError(
            f"{path} was projected under sjlt's stream spec version {record['spec_version']}, but this sjlt "
            f"implements version {spec.SPEC_VERSION}, whose matrix differs (docs/spec.md, version history): "
            f"project the input again with this version (same seed) rather than mixing the two, or read it "
            f"with the sjlt release that wrote it"
        )
    return record


def _has_plot_mark(path: Path) -> bool:
    mark = PLOT_MARK.rsplit(" ", 1)[0].encode()  # any version of sjlt evaluate
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(_MARK_WINDOW)
        f.seek(max(0, size - _MARK_WINDOW))
        tail = f.read()
    return mark in head or mark in tail


def written_by_sjlt(path: Path) -> bool:
    """Whether the existing file ``path`` carries the record sjlt writes with its outputs (see
    the module docstring). Unreadable or unknown files are not sjlt's."""
    path = Path(path)
    name = path.name.lower()
    try:
        if not path.is_file():
            return False
        if name.endswith(".npy"):
            sidecar = path.with_name(path.name + ".json")
            return sidecar.is_file() and _npy_matches_record(path, _read_json(sidecar))
        if name.endswith((".parquet", ".pq")):
            return is_projection_record(_parquet_record(path))
        if name.endswith(".json"):
            record = _read_json(path)
            return is_projection_record(record) or (
                isinstance(record, dict) and record.get("written_by") == EVALUATE_WRITER
            )
        if path.suffix.lower().lstrip(".") in PLOT_FORMATS:
            return _has_plot_mark(path)
    except Exception:  # noqa: BLE001 - a file we cannot parse is, by definition, not one we wrote
        return False
    return False
