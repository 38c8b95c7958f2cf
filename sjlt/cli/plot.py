"""The figure of ``sjlt evaluate --plot``: distortion and recall against k, and a scatter of
projected against original distances for one k. Drawn with matplotlib's Agg canvas directly,
so no GUI backend is touched and pyplot's global state is left alone."""

from __future__ import annotations

from pathlib import Path

from ..io.atomic import atomic_outputs
from ..io.provenance import PLOT_MARK
from .errors import CLIError


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError(
            "--plot needs matplotlib, which is not installed; install it with "
            "pip install 'seeded-sjlt[plot]' (or pip install matplotlib), or drop --plot"
        ) from None


def write_report(path: Path, reports, scatter, *, neighbors: int, n_samples: int, overwrite: bool) -> None:
    """Draws the figure into ``path`` (.png, .svg or .pdf, checked by the caller beforehand),
    marked as sjlt's in its metadata so that a later --overwrite may replace it."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    dims = [r.k for r in reports]
    figure = Figure(figsize=(15, 4.6), layout="constrained")
    FigureCanvasAgg(figure)
    distortion_axes, recall_axes, scatter_axes = figure.subplots(1, 3)

    distortion_axes.plot(dims, [r.distortion_p50 for r in reports], "o-", label="median")
    distortion_axes.plot(dims, [r.distortion_p99 for r in reports], "s-", label="99th percentile")
    bounded = [(r.k, r.jl_bound_eps) for r in reports if r.jl_bound_eps is not None]
    if bounded:
        distortion_axes.plot(*zip(*bounded), "k^--", label=f"JL bound eps (n={n_samples})")
    distortion_axes.set(
        xscale="log",
        xlabel="k (output dimensions)",
        ylabel="|projected / original squared distance − 1|",
        title="Pairwise distance distortion",
    )
    distortion_axes.set_xticks(dims, [str(k) for k in dims])
    distortion_axes.minorticks_off()
    distortion_axes.legend()

    recall_axes.plot(dims, [r.recall for r in reports], "o-")
    recall_axes.set(
        xscale="log",
        ylim=(0, 1.02),
        xlabel="k (output dimensions)",
        ylabel=f"recall@{neighbors}",
        title=f"Exact {neighbors}-NN kept after projection",
    )
    recall_axes.set_xticks(dims, [str(k) for k in dims])
    recall_axes.minorticks_off()

    if scatter is not None:
        scatter_axes.scatter(scatter.original, scatter.projected, s=3, alpha=0.3, linewidths=0)
        top = max(float(scatter.original.max()), float(scatter.projected.max()))
        scatter_axes.plot([0, top], [0, top], "k--", linewidth=1, label="no distortion")
        scatter_axes.legend()
        scatter_axes.set(title=f"Squared distances, k = {scatter.k} ({len(scatter.original):,} pairs)")
    scatter_axes.set(xlabel="original", ylabel="projected")

    image_format = Path(path).suffix.lstrip(".").lower()
    metadata = {"Software" if image_format == "png" else "Creator": PLOT_MARK}
    with atomic_outputs(Path(path), overwrite=overwrite, role="--plot") as (temporary,):
        figure.savefig(temporary, format=image_format, dpi=110, metadata=metadata)
