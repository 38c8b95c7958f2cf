"""The progress bar (on a terminal only) and the one-line summary of a run."""
from __future__ import annotations

import sys
from dataclasses import dataclass

from tqdm import tqdm


def progress_bar(total_rows: int, *, quiet: bool) -> tqdm:
    """Rows done, rows/s and ETA on stderr; silent under --quiet or when stderr is not a
    terminal (a log file would fill with carriage returns)."""
    return tqdm(total=total_rows, unit="rows", unit_scale=True, file=sys.stderr,
                disable=quiet or not sys.stderr.isatty(), dynamic_ncols=True, smoothing=0.1)


@dataclass(frozen=True)
class FileResult:
    """What projecting one file did: rows and widths, input bytes read, seconds taken."""

    rows: int
    in_features: int | None
    out_features: int
    bytes_read: int
    seconds: float
    dropped_columns: tuple[str, ...] = ()  # input columns a .npy output could not keep


def summary_line(results: list[FileResult], seconds: float, destination: str) -> str:
    rows = sum(r.rows for r in results)
    read = sum(r.bytes_read for r in results)
    widths = sorted({r.in_features for r in results if r.in_features is not None})
    in_text = ",".join(str(w) for w in widths) or "?"
    files = f"{len(results)} files, " if len(results) != 1 else ""
    rate = rows / seconds if seconds > 0 else float("inf")
    megabytes = read / 1e6 / seconds if seconds > 0 else float("inf")
    return (f"sjlt: projected {files}{rows:,} rows, {in_text} -> {results[0].out_features} dims, "
            f"in {seconds:.2f} s: {rate:,.0f} rows/s, {megabytes:,.1f} MB/s read -> {destination}")
