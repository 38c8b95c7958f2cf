"""``sjlt evaluate``: its numbers against an independent computation, the plot, its errors."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from scipy.spatial.distance import pdist, squareform
from sklearn.random_projection import johnson_lindenstrauss_min_dim
from test_cli_helpers import CLI_RUNS_KERNEL, assert_one_error_line, random_rows, run_cli

import sjlt
from sjlt.metrics import jl_bound_eps


def independent_metrics(x: np.ndarray, k: int, seed: int, neighbors: int):
    """Distortion percentiles and recall computed with scipy and plain numpy."""
    y = sjlt.sparse_jl(torch.from_numpy(x), k, seed=seed).double().numpy()
    before, after = pdist(x.astype(np.float64), "sqeuclidean"), pdist(y, "sqeuclidean")
    distortion = np.abs(after / before - 1)
    full_before, full_after = squareform(before), squareform(after)
    np.fill_diagonal(full_before, np.inf)
    np.fill_diagonal(full_after, np.inf)
    hits = 0
    for row in range(len(x)):
        truth = set(np.argsort(full_before[row])[:neighbors])
        found = set(np.argsort(full_after[row])[:neighbors])
        hits += len(truth & found)
    return np.percentile(distortion, 50), np.percentile(distortion, 99), hits / (len(x) * neighbors)


def test_table_and_json_match_an_independent_computation(tmp_path, capsys):
    x = random_rows(120, 64)
    np.save(tmp_path / "emb.npy", x)
    code, out, err = run_cli(
        capsys,
        "evaluate",
        tmp_path / "emb.npy",
        "--dims",
        "8,32,16",
        "--sample",
        500,
        "--seed",
        4,
        "--neighbors",
        5,
        "--json",
        tmp_path / "r.json",
    )
    assert code == 0, err
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["sample"] == 120 and record["rows"] == 120 and record["features"] == 64
    assert [d["k"] for d in record["dims"]] == [8, 16, 32]
    for entry in record["dims"]:
        p50, p99, recall = independent_metrics(x, entry["k"], seed=4, neighbors=5)
        rel = 1e-4 if CLI_RUNS_KERNEL else 1e-6  # kernel vs reference: float32 tolerance, see helpers
        assert entry["distortion_p50"] == pytest.approx(p50, rel=rel)
        assert entry["distortion_p99"] == pytest.approx(p99, rel=rel)
        assert entry["recall"] == pytest.approx(recall, abs=0.02)  # near-ties may order differently
        assert entry["jl_bound_eps"] is None  # 24 ln 120 = 115 > 32: the bound says nothing
    assert "distortion p50" in out and "recall@5" in out and "JL-bound eps (n=120)" in out
    assert "none (needs k >= 115)" in out


def test_jl_bound_eps_inverts_sklearns_formula():
    for n, k in [(2000, 256), (2000, 1000), (10**6, 4096), (50, 500)]:
        eps = jl_bound_eps(n, k)
        assert 0 < eps < 1
        exact = 4 * math.log(n) / (eps**2 / 2 - eps**3 / 3)
        assert exact == pytest.approx(k, rel=1e-9)
        assert johnson_lindenstrauss_min_dim(n, eps=eps) in (k - 1, k)  # sklearn truncates to int
    assert jl_bound_eps(2000, 182) is None and jl_bound_eps(2000, 183) is not None


def test_parquet_sample_and_plot(tmp_path, capsys):
    x = random_rows(400, 32)
    pq.write_table(
        pa.table({"id": np.arange(400), "v": pa.array(list(x))}), tmp_path / "emb.parquet", row_group_size=64
    )
    code, out, err = run_cli(
        capsys,
        "evaluate",
        tmp_path / "emb.parquet",
        "--dims",
        "4,8,16",
        "--sample",
        150,
        "--plot",
        tmp_path / "report.png",
        "--json",
        tmp_path / "r.json",
    )
    assert code == 0, err
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["sample"] == 150 and record["rows"] == 400
    medians = [d["distortion_p50"] for d in record["dims"]]
    assert medians[0] > medians[-1]  # more dimensions, less distortion
    png = (tmp_path / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_plot_without_matplotlib_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "emb.npy", random_rows(30, 8))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    code, out, err = run_cli(capsys, "evaluate", tmp_path / "emb.npy", "--dims", "4", "--plot", tmp_path / "r.png")
    assert code == 1
    assert_one_error_line(err, "--plot needs matplotlib", "pip install")
    assert out == "" and not (tmp_path / "r.png").exists()


def test_too_few_rows(tmp_path, capsys):
    np.save(tmp_path / "emb.npy", random_rows(10, 8))
    code, _, err = run_cli(capsys, "evaluate", tmp_path / "emb.npy", "--dims", "4")
    assert code == 1
    assert_one_error_line(err, "recall@10 needs more than 10 rows", "--neighbors")


def test_nonfinite_sample(tmp_path, capsys):
    x = random_rows(40, 8)
    x[3, 2] = np.nan
    np.save(tmp_path / "emb.npy", x)
    code, _, err = run_cli(capsys, "evaluate", tmp_path / "emb.npy", "--dims", "4")
    assert code == 1
    assert_one_error_line(err, "NaN or inf")


def test_directory_is_refused(tmp_path, capsys):
    np.save(tmp_path / "a.npy", random_rows(20, 8))
    np.save(tmp_path / "b.npy", random_rows(20, 8))
    code, _, err = run_cli(capsys, "evaluate", tmp_path, "--dims", "4")
    assert code == 1
    assert_one_error_line(err, "reads one file")


@pytest.mark.parametrize(
    "flags",
    [
        ["--dims", "8,x"],
        ["--dims", "0"],
        ["--dims", ","],
        ["--dims", "8,16", "--plot-k", "32"],
        ["--dims", "4,8", "--nnz", "5"],
        ["--sample", "0"],
    ],
)
def test_invalid_flags_exit_2(tmp_path, capsys, flags):
    np.save(tmp_path / "emb.npy", random_rows(20, 8))
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, "evaluate", tmp_path / "emb.npy", *flags)
    assert exit_info.value.code == 2
    assert "usage: sjlt evaluate" in capsys.readouterr().err
