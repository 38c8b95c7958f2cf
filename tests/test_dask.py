"""sjlt.dask.project and ``sjlt project --scheduler`` on a real two-process Dask cluster."""

from __future__ import annotations

import logging
import socket

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from test_cli_helpers import assert_one_error_line, leftovers, random_rows, run_cli

import sjlt
import sjlt.dask

dask = pytest.importorskip("dask")  # the `test` extra installs dask; this only names the need
import dask.array as da  # noqa: E402
import dask.dataframe as dd  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=logging.ERROR
    ) as local_cluster:
        yield local_cluster


@pytest.fixture(scope="module")
def client(cluster):
    with Client(cluster, set_as_default=False) as dask_client:
        yield dask_client


def in_memory(x: np.ndarray, k: int, seed: int, nnz=None) -> np.ndarray:
    return sjlt.sparse_jl(torch.from_numpy(np.ascontiguousarray(x)), k, seed=seed, nnz=nnz).numpy()


def test_array_chunked_both_ways_matches_in_memory(client):
    x = random_rows(1000, 60)
    X = da.from_array(x, chunks=(170, 25))  # several feature chunks: project() rechunks them
    Y = sjlt.dask.project(X, 24, seed=2**63 + 5, nnz=3)
    assert Y.shape == (1000, 24) and Y.dtype == np.float32
    assert Y.chunks == (X.chunks[0], (24,))
    result = client.compute(Y).result()
    np.testing.assert_array_equal(result, in_memory(x, 24, 2**63 + 5, nnz=3))
    assert len(client.scheduler_info()["workers"]) == 2


def test_float64_array_keeps_its_dtype(client):
    x = random_rows(300, 20, np.float64)
    Y = sjlt.dask.project(da.from_array(x, chunks=(64, 20)), 7, seed=11)
    result = client.compute(Y).result()
    assert result.dtype == np.float64
    np.testing.assert_array_equal(result, in_memory(x, 7, 11))


def test_numeric_dataframe(client):
    x = random_rows(200, 6, np.float64)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(6)], index=np.arange(1000, 1200))
    frame["count"] = np.random.default_rng().integers(0, 50, 200)
    result = client.compute(sjlt.dask.project(dd.from_pandas(frame, npartitions=3), 4, seed=8)).result()
    assert list(result.columns) == sjlt.dask.output_column_names(4)
    assert (result.index == frame.index).all()
    np.testing.assert_array_equal(result.to_numpy(), in_memory(frame.to_numpy(np.float64), 4, 8))


def test_list_column_from_parquet_keeps_other_columns(client, tmp_path):
    x = random_rows(250, 16)
    ids = np.random.default_rng().integers(0, 10**9, 250)
    pq.write_table(pa.table({"id": ids, "emb": pa.array(list(x))}), tmp_path / "t.parquet", row_group_size=60)
    frame = dd.read_parquet(tmp_path / "t.parquet")
    result = client.compute(sjlt.dask.project(frame, 5, seed=1)).result()
    np.testing.assert_array_equal(result["id"].to_numpy(), ids)
    np.testing.assert_array_equal(np.stack(result["emb"].to_numpy()), in_memory(x, 5, 1))


def test_arrow_list_column_becomes_fixed_size_list(client):
    x = random_rows(90, 12)
    frame = pd.DataFrame(
        {
            "name": [f"doc{i}" for i in range(90)],
            "emb": pd.Series(pa.array(list(x)), dtype=pd.ArrowDtype(pa.list_(pa.float32()))),
        }
    )
    projected = sjlt.dask.project(dd.from_pandas(frame, npartitions=2), 6, seed=3)
    assert projected.dtypes["emb"] == pd.ArrowDtype(pa.list_(pa.float32(), 6))
    result = client.compute(projected).result()
    assert list(result["name"]) == list(frame["name"])
    np.testing.assert_array_equal(np.stack(result["emb"].to_numpy()), in_memory(x, 6, 3))


def test_bad_arguments_fail_before_any_work():
    X = da.from_array(random_rows(10, 4), chunks=5)
    with pytest.raises(ValueError, match="2-D"):
        sjlt.dask.project(da.ones(10, chunks=5), 4, seed=0)
    with pytest.raises(TypeError, match="astype"):
        sjlt.dask.project(da.from_array(np.arange(40).reshape(10, 4), chunks=5), 4, seed=0)
    with pytest.raises(TypeError, match="sjlt.sparse_jl"):
        sjlt.dask.project(random_rows(10, 4), 4, seed=0)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        sjlt.dask.project(X, 4, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        sjlt.dask.project(X, 4, seed=1.5)
    with pytest.raises(ValueError, match="nnz"):
        sjlt.dask.project(X, 4, seed=0, nnz=9)
    with pytest.raises(ValueError, match="n_components"):
        sjlt.dask.project(X, 0, seed=0)
    with pytest.raises(ValueError, match="device"):
        sjlt.dask.project(X, 4, seed=0, device="gpu")
    frame = dd.from_pandas(pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]}), npartitions=1)
    with pytest.raises(ValueError, match="neither numeric nor a list"):
        sjlt.dask.project(frame, 2, seed=0)
    lists = pd.DataFrame(
        {
            "a": pd.Series(pa.array([[1.0], [2.0]]), dtype=pd.ArrowDtype(pa.list_(pa.float64()))),
            "b": pd.Series(pa.array([[1.0], [2.0]]), dtype=pd.ArrowDtype(pa.list_(pa.float64()))),
        }
    )
    with pytest.raises(ValueError, match="several list"):
        sjlt.dask.project(dd.from_pandas(lists, npartitions=1), 2, seed=0)


def test_cli_scheduler_projects_each_file_on_the_cluster(cluster, tmp_path, capsys):
    (tmp_path / "in").mkdir()
    inputs = {}
    for i in range(4):
        x = random_rows(50 + 10 * i, 24)
        inputs[f"shard{i}.parquet"] = x
        pq.write_table(
            pa.table({"row": np.arange(len(x)), "emb": pa.array(list(x))}), tmp_path / "in" / f"shard{i}.parquet"
        )
    code, out, err = run_cli(
        capsys,
        "project",
        tmp_path / "in",
        tmp_path / "out",
        "--dim",
        8,
        "--seed",
        77,
        "--scheduler",
        cluster.scheduler_address,
    )
    assert code == 0, err
    assert "4 files" in out and "260 rows" in out
    for name, x in inputs.items():
        table = pq.read_table(tmp_path / "out" / name)
        np.testing.assert_array_equal(np.stack(table.column("emb").to_numpy(zero_copy_only=False)), in_memory(x, 8, 77))
    assert leftovers(tmp_path / "out") == []


def test_cli_scheduler_reports_the_files_that_failed(cluster, tmp_path, capsys):
    (tmp_path / "in").mkdir()
    good = random_rows(30, 8)
    pq.write_table(pa.table({"emb": pa.array(list(good))}), tmp_path / "in" / "good.parquet")
    ragged = [list(v) for v in random_rows(30, 8)]
    ragged[4] = ragged[4][:3]
    pq.write_table(pa.table({"emb": pa.array(ragged, pa.list_(pa.float32()))}), tmp_path / "in" / "ragged.parquet")
    code, _, err = run_cli(
        capsys, "project", tmp_path / "in", tmp_path / "out", "--dim", 4, "--scheduler", cluster.scheduler_address
    )
    assert code == 1
    assert "1 of 2 files failed" in err and "ragged.parquet" in err and "row 4" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["good.parquet"]
    assert "Traceback" not in err


def test_cli_unreachable_scheduler(tmp_path, capsys, monkeypatch):
    from sjlt.io import cluster as cluster_module

    monkeypatch.setattr(cluster_module, "_CONNECT_TIMEOUT", "1s")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    np.save(tmp_path / "a.npy", random_rows(5, 4))
    code, _, err = run_cli(
        capsys, "project", tmp_path / "a.npy", tmp_path / "b.npy", "--dim", 2, "--scheduler", f"tcp://127.0.0.1:{port}"
    )
    assert code == 1
    assert_one_error_line(err, "cannot reach the Dask scheduler", "dask scheduler")
    assert not (tmp_path / "b.npy").exists()
