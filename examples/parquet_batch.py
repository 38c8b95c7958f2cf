"""A nightly batch job over a parquet embedding store: project the shards that need it.

    python examples/parquet_batch.py STORE_DIR OUT_DIR --dim 128 --seed 0 [--scheduler tcp://HOST:8786]

STORE_DIR holds parquet shards (one embedding column, any other columns). For each shard,
OUT_DIR gets a shard of the same name with the embedding column projected and the other columns
kept. A shard whose output already records the same settings (seed, k, nnz, stream spec) and
the same row count is up to date and skipped, so the job can run again as the store grows, or
after a change of seed or k, and only redoes what changed. Each output is written crash-safely
(temporary file, fsync, rename): an interrupted run leaves whole shards or none.

``--make-store N`` first writes a small synthetic store (N shards) to try it on.
Built on the file-projection layer behind ``sjlt project``, :mod:`sjlt.io`: project_file,
project_on_cluster and read_provenance.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sjlt import spec
from sjlt.io import FileProjectionError, Settings, project_file, project_on_cluster, read_provenance


def up_to_date(shard: Path, output: Path, settings: Settings) -> bool:
    """True when ``output`` was made from ``shard``'s current rows with these settings."""
    if not output.exists():
        return False
    try:
        recorded = read_provenance(output)
    except (OSError, pa.ArrowException, FileProjectionError):
        return False  # unreadable, or made under an older stream spec: make it again
    if recorded is None:
        return False
    wanted = {
        "seed": settings.seed,
        "out_features": settings.out_features,
        "nnz": spec.resolve_nnz(settings.nnz, settings.out_features),
    }
    rows = pq.ParquetFile(shard).metadata.num_rows
    return (
        all(recorded.get(key) == value for key, value in wanted.items())
        and recorded.get("input_shape", [None])[0] == rows
    )


def make_store(directory: Path, shards: int, rows: int = 500, features: int = 384) -> None:
    """A synthetic store: ``shards`` parquet files of (id, text, embedding) rows."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for index in range(shards):
        embeddings = rng.standard_normal((rows, features), dtype=np.float32)
        ids = np.arange(index * rows, (index + 1) * rows)
        table = pa.table(
            {
                "id": ids,
                "text": [f"document {i}" for i in ids],
                "embedding": pa.FixedSizeListArray.from_arrays(pa.array(embeddings.reshape(-1)), features),
            }
        )
        pq.write_table(table, directory / f"shard-{index:05d}.parquet")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path, help="directory of parquet shards")
    parser.add_argument("out", type=Path, help="directory of projected shards")
    parser.add_argument("--dim", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nnz", type=int)
    parser.add_argument("--column", help="the embedding column, if a shard has several")
    parser.add_argument("--scheduler", help="a Dask scheduler address: one task per shard")
    parser.add_argument("--make-store", type=int, metavar="N", help="first write N synthetic shards to STORE")
    args = parser.parse_args(argv)

    if args.make_store:
        make_store(args.store, args.make_store)
    # overwrite: a stale projection (sjlt's own output, by its record) is made again in place.
    settings = Settings(
        out_features=args.dim, seed=spec.check_seed(args.seed), nnz=args.nnz, column=args.column, overwrite=True
    )
    shards = sorted(args.store.glob("*.parquet"))
    if not shards:
        print(f"parquet_batch: error: no .parquet shards in {args.store}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    pending = [
        (shard, args.out / shard.name) for shard in shards if not up_to_date(shard, args.out / shard.name, settings)
    ]
    started = time.perf_counter()
    try:
        if args.scheduler:
            results = project_on_cluster(pending, settings, args.scheduler) if pending else []
        else:
            results = [project_file(shard, output, settings) for shard, output in pending]
    except FileProjectionError as error:
        print(f"parquet_batch: error: {error}", file=sys.stderr)
        return 1
    rows = sum(r.rows for r in results)
    print(
        f"parquet_batch: projected {len(results)} shards ({rows:,} rows) in "
        f"{time.perf_counter() - started:.2f} s; {len(shards) - len(pending)} already up to date"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
