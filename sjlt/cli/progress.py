"""The progress bar (on a terminal only) and the one-line summary of a run."""

from __future__ import annotations

import sys

from tqdm import tqdm

from ..io.project import FileResult


def progress_bar(total_rows: int, *, quiet: bool) -> tqdm:
    """Rows done, rows/s and ETA on stderr; silent under --quiet or when stderr is not a
    terminal (a log file would fill with carriage returns)."""
    return tqdm(
        total=total_rows,
        unit="rows",
        unit_scale=True,
        file=sys.stderr,
        disable=quiet or not sys.stderr.isatty(),
        dynamic_ncols=True,
        smoothing=0.1,
    )


def summary_line(results: list[FileResult], seconds: float, destination: str) -> str:
    rows = sum(r.rows for r in results)
    read = sum(r.bytes_read for r in results)
    widths = sorted({r.in_features for r in results if r.in_features is not None})
    in_text = ",".join(str(w) for w in widths) or "?"
    files = f"{len(results)} files, " if len(results) != 1 else ""
    rate = rows / seconds if seconds > 0 else float("inf")
    megabytes = read / 1e6 / seconds if seconds > 0 else float("inf")
    return (
        f"sjlt: projected {files}{rows:,} rows, {in_text} -> {results[0].out_features} dims, "
        f"in {seconds:.2f} s: {rate:,.0f} rows/s, {megabytes:,.1f} MB/s read -> {destination}"
    )
