"""The ``sjlt`` command line: ``sjlt project`` and ``sjlt evaluate`` (also ``python -m sjlt``).

Argument parsing, messages and exit codes; the work is done by :mod:`sjlt.io` (files) and
:mod:`sjlt.metrics` (evaluation).

Exit status: 0 on success; 1 for a problem with the input, output or environment (one line
``sjlt: error: ...`` saying what and how to fix it); 2 for invalid flags, as argparse does;
128 + the signal number after SIGINT or SIGTERM, with no partial output left behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings

from .. import __version__, spec
from .._device import DEVICE_CHOICES, DeviceUnavailable
from ..io.errors import FileProjectionError, Interrupted
from ..io.signals import interrupts_as_exceptions
from .errors import CLIError

__all__ = ["main", "build_parser", "CLIError"]

#: torch's notices about its sparse CSR tensors (used by the CPU reference): they tell a user of
#: the command line nothing they can act on.
_TORCH_SPARSE_NOTICES = (
    "Sparse CSR tensor support is in beta state",
    "Sparse invariant checks are implicitly disabled",
)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _seed(text: str) -> int:
    try:
        return spec.check_seed(int(text, 0))
    except (ValueError, TypeError) as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid seed: {error}") from None


def _dims(text: str) -> list[int]:
    try:
        dims = [_positive_int(part) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 32,64,128, got {text!r}"
        ) from None
    if not dims:
        raise argparse.ArgumentTypeError("expected at least one k, like 32,64,128")
    return sorted(set(dims))


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    common.add_argument(
        "--device",
        choices=DEVICE_CHOICES,
        default="auto",
        help="where to compute: auto = the GPU when torch sees one (default)",
    )
    common.add_argument(
        "--column",
        metavar="NAME",
        help="the embedding column of a parquet file (found automatically when "
        "there is exactly one list-of-floats column)",
    )

    parser = argparse.ArgumentParser(
        prog="sjlt", description="Seeded sparse Johnson-Lindenstrauss projections of embedding files."
    )
    parser.add_argument("--version", action="version", version=f"sjlt {__version__} (stream spec {spec.SPEC_VERSION})")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    project = commands.add_parser(
        "project",
        parents=[common],
        help="project a .npy or parquet file of embeddings to k dims",
        description="Project every row of INPUT to --dim dimensions with the sparse JL matrix of "
        "--seed, streaming in batches with bounded memory. OUTPUT appears complete or "
        "not at all; its format follows its extension (.npy or .parquet).",
    )
    project.add_argument("input", metavar="INPUT", help=".npy or .parquet file, a directory of them, or a quoted glob")
    project.add_argument(
        "output", metavar="OUTPUT", help="output file (.npy/.parquet); a directory when INPUT names several files"
    )
    project.add_argument("--dim", "-k", type=_positive_int, required=True, metavar="K", help="output dimensions")
    project.add_argument("--seed", type=_seed, default=0, help="the matrix's seed, an int in [0, 2**64) (default 0)")
    project.add_argument(
        "--nnz",
        type=_positive_int,
        metavar="N",
        help="nonzeros per input column (default 8, 16 from K = 2048, 32 beyond K = 8192, "
        "trimmed to the fewest blocks of 16-row windows that cover K and to at most K/16; "
        "min(8, K) below K = 16)",
    )
    project.add_argument(
        "--batch-rows", type=_positive_int, metavar="R", help="rows per batch (default: about 64 MB of input)"
    )
    project.add_argument("--dtype", choices=spec.NUMPY_FLOAT_DTYPES, help="output dtype (default: the input's)")
    project.add_argument(
        "--overwrite", action="store_true", help="replace an existing OUTPUT written by sjlt (never any other file)"
    )
    project.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no summary line")
    project.add_argument(
        "--allow-nonfinite", action="store_true", help="project rows holding NaN or inf instead of stopping"
    )
    project.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="spread the input files over the Dask cluster at ADDRESS (tcp://host:8786), one task per file",
    )

    evaluate = commands.add_parser(
        "evaluate",
        parents=[common],
        help="measure distortion and kNN recall for several k",
        description="Project a random sample of INPUT's rows to each k and report how pairwise "
        "distances and nearest neighbours survive, next to the JL bound's eps.",
    )
    evaluate.add_argument("input", metavar="INPUT", help=".npy or .parquet file")
    evaluate.add_argument(
        "--dims", type=_dims, default=[32, 64, 128, 256], metavar="K,K,...", help="the k to try (default 32,64,128,256)"
    )
    evaluate.add_argument(
        "--sample",
        type=_positive_int,
        default=2000,
        metavar="N",
        help="rows to sample (default 2000; time and memory grow as N²)",
    )
    evaluate.add_argument("--seed", type=_seed, default=0, help="seed of the matrix and of the row sample (default 0)")
    evaluate.add_argument(
        "--nnz",
        type=_positive_int,
        metavar="N",
        help="nonzeros per input column (default 8, 16 from k = 2048, 32 beyond k = 8192, "
        "trimmed to the fewest blocks of 16-row windows that cover k and to at most k/16; "
        "min(8, k) below k = 16)",
    )
    evaluate.add_argument(
        "--neighbors", type=_positive_int, default=10, metavar="N", help="the n of recall@n (default 10)"
    )
    evaluate.add_argument("--plot", metavar="FILE.png", help="also draw the results (needs matplotlib)")
    evaluate.add_argument(
        "--plot-k", type=_positive_int, metavar="K", help="the k of the scatter panel (default: the middle of --dims)"
    )
    evaluate.add_argument("--json", metavar="FILE.json", help="also save the table as JSON")
    evaluate.add_argument(
        "--overwrite", action="store_true", help="replace an existing --json/--plot file written by sjlt"
    )
    parser.command_parsers = {"project": project, "evaluate": evaluate}  # for their own usage lines
    return parser


def _check_combinations(parser: argparse.ArgumentParser, args) -> None:
    """Flag checks that involve two flags; they exit 2 like any other invalid flag."""
    parser = parser.command_parsers[args.command]
    smallest_k = args.dim if args.command == "project" else min(args.dims)
    if args.nnz is not None and args.nnz > smallest_k:
        parser.error(
            f"--nnz {args.nnz} exceeds k = {smallest_k}; each input column has nnz "
            f"distinct nonzero rows, so use --nnz <= {smallest_k}"
        )
    if args.command == "evaluate" and args.plot_k is not None and args.plot_k not in args.dims:
        parser.error(f"--plot-k {args.plot_k} is not one of --dims {','.join(map(str, args.dims))}")
    if args.command == "evaluate" and args.sample <= args.neighbors:
        parser.error(
            f"--sample {args.sample} is too small: recall@{args.neighbors} needs more "
            f"than --neighbors {args.neighbors} rows; use --sample {args.neighbors + 1} "
            f"or more (or a smaller --neighbors)"
        )


def _commands():
    from . import evaluate, project

    return {"project": project.run, "evaluate": evaluate.run}


def main(argv=None) -> int:
    """Runs the command line on ``argv`` (default: sys.argv[1:]) and returns the exit status.

    The signal handlers come first, before parsing and before any heavy import (torch takes
    about a second), so Ctrl-C or SIGTERM at any moment exits 130/143 with one line.
    """
    try:
        with interrupts_as_exceptions():
            return _run(argv)
    except Interrupted as interrupt:
        print(f"sjlt: stopped by {interrupt.name}; no partial output was left", file=sys.stderr)
        return 128 + interrupt.signum
    except KeyboardInterrupt:  # main() called outside the main thread keeps Python's handler
        print("sjlt: interrupted; no partial output was left", file=sys.stderr)
        return 130


def _run(argv) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        message = f"unrecognized arguments: {' '.join(extra)}"
        if args.command == "project" and any(os.path.exists(a) for a in extra):
            message += (
                "; project takes one INPUT and one OUTPUT. If the shell expanded an "
                "unquoted glob into several files, quote it: sjlt project 'dir/*.parquet' OUT"
            )
        parser.command_parsers[args.command].error(message)
    _check_combinations(parser, args)
    try:
        with warnings.catch_warnings():
            for notice in _TORCH_SPARSE_NOTICES:
                warnings.filterwarnings("ignore", message=notice)
            return _commands()[args.command](args)
    except (CLIError, FileProjectionError) as error:
        if args.debug:
            traceback.print_exc()
        print(f"sjlt: error: {error}", file=sys.stderr)
        return 1
    except DeviceUnavailable as error:
        if args.debug:
            traceback.print_exc()
        print(
            f"sjlt: error: --device {args.device} was given but {error.reason}; use --device cpu (or auto)",
            file=sys.stderr,
        )
        return 1
    except Exception as error:
        if args.debug:
            raise
        print(
            f"sjlt: error: unexpected {type(error).__name__}: {error} (run again with --debug "
            f"for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1
