"""``sjlt project`` in-process: formats, dtypes, metadata, collections, overwrite, errors."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from test_cli_helpers import assert_one_error_line, assert_projection_equal, digest, leftovers, random_rows, run_cli

import sjlt
from sjlt.io import npy as npy_module
from sjlt.io.provenance import read_provenance


def expected(x: np.ndarray, k: int, seed: int, nnz=None) -> np.ndarray:
    return sjlt.sparse_jl(torch.from_numpy(np.ascontiguousarray(x)), k, seed=seed, nnz=nnz).numpy()


def parquet_matrix(path, column: str) -> np.ndarray:
    return np.stack(pq.read_table(path).column(column).to_numpy(zero_copy_only=False))


# ----------------------------------------------------------------------------------------------
# .npy
# ----------------------------------------------------------------------------------------------


def test_npy_in_batches_matches_in_memory_projection_and_records_settings(tmp_path, capsys):
    x = random_rows(1000, 48)
    np.save(tmp_path / "in.npy", x)
    before = digest(tmp_path / "in.npy")
    code, out, err = run_cli(
        capsys,
        "project",
        tmp_path / "in.npy",
        tmp_path / "out.npy",
        "--dim",
        20,
        "--seed",
        123,
        "--nnz",
        3,
        "--batch-rows",
        97,
    )
    assert code == 0, err
    y = np.load(tmp_path / "out.npy")
    assert y.dtype == np.float32 and y.shape == (1000, 20)
    assert_projection_equal(y, expected(x, 20, 123, nnz=3))
    sidecar = json.loads((tmp_path / "out.npy.json").read_text())
    assert sidecar["seed"] == 123 and sidecar["out_features"] == 20 and sidecar["nnz"] == 3
    assert sidecar["spec_version"] == sjlt.SPEC_VERSION and sidecar["sjlt_version"] == sjlt.__version__
    assert sidecar["input_shape"] == [1000, 48] and sidecar["input_dtype"] == "float32"
    assert "1,000 rows" in out and "48 -> 20 dims" in out and "rows/s" in out and "MB/s" in out
    assert digest(tmp_path / "in.npy") == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_output_keeps_the_input_dtype(tmp_path, capsys, dtype):
    x = random_rows(300, 32, dtype)
    np.save(tmp_path / "in.npy", x)
    code, _, err = run_cli(
        capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 8, "--batch-rows", 64, "--quiet"
    )
    assert code == 0, err
    y = np.load(tmp_path / "out.npy")
    assert y.dtype == dtype
    assert_projection_equal(y, expected(x, 8, 0))


def test_dtype_flag_projects_in_the_wider_type_then_casts(tmp_path, capsys):
    x = random_rows(200, 32, np.float64)
    np.save(tmp_path / "in.npy", x)
    code, _, err = run_cli(
        capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 8, "--dtype", "float16", "--quiet"
    )
    assert code == 0, err
    y = np.load(tmp_path / "out.npy")
    assert y.dtype == np.float16
    projected = sjlt.sparse_jl(torch.from_numpy(x), 8, seed=0)  # in float64, then cast
    assert_projection_equal(y, projected.to(torch.float16).numpy())
    assert json.loads((tmp_path / "out.npy.json").read_text())["output_dtype"] == "float16"


def test_fortran_order_big_endian_and_3d_inputs(tmp_path, capsys):
    x = random_rows(150, 24)
    np.save(tmp_path / "fortran.npy", np.asfortranarray(x))
    np.save(tmp_path / "big.npy", x.astype(">f4"))
    np.save(tmp_path / "cube.npy", x.reshape(10, 15, 24))
    for name in ("fortran", "big", "cube"):
        code, _, err = run_cli(
            capsys,
            "project",
            tmp_path / f"{name}.npy",
            tmp_path / f"{name}_out.npy",
            "--dim",
            6,
            "--batch-rows",
            40,
            "--quiet",
        )
        assert code == 0, err
    assert_projection_equal(np.load(tmp_path / "fortran_out.npy"), expected(x, 6, 0))
    assert_projection_equal(np.load(tmp_path / "big_out.npy"), expected(x, 6, 0))
    cube = np.load(tmp_path / "cube_out.npy")
    assert cube.shape == (10, 15, 6)
    assert_projection_equal(cube.reshape(150, 6), expected(x, 6, 0))


def test_python_dash_m_runs_the_same_command(tmp_path):
    x = random_rows(64, 16)
    np.save(tmp_path / "in.npy", x)
    done = subprocess.run(
        [sys.executable, "-m", "sjlt", "project", str(tmp_path / "in.npy"), str(tmp_path / "out.npy"), "--dim", "4"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bar off a terminal, and no library warnings
    assert done.stdout.startswith("sjlt: projected 64 rows, 16 -> 4 dims")
    assert_projection_equal(np.load(tmp_path / "out.npy"), expected(x, 4, 0))


def test_quiet_prints_nothing(tmp_path, capsys):
    np.save(tmp_path / "in.npy", random_rows(10, 8))
    code, out, err = run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 4, "-q")
    assert (code, out, err) == (0, "", "")


# ----------------------------------------------------------------------------------------------
# parquet
# ----------------------------------------------------------------------------------------------


def embedding_table(x: np.ndarray, fixed: bool) -> pa.Table:
    values = pa.array(x.reshape(-1))
    column = (
        pa.FixedSizeListArray.from_arrays(values, x.shape[1])
        if fixed
        else pa.ListArray.from_arrays(pa.array(np.arange(0, x.size + 1, x.shape[1], dtype=np.int32)), values)
    )
    rng = np.random.default_rng()
    return pa.table(
        {
            "id": pa.array(rng.integers(0, 10**9, len(x))),
            "text": pa.array([f"doc {i}" for i in range(len(x))]),
            "emb": column,
        }
    ).replace_schema_metadata({b"owner": b"test"})


@pytest.mark.parametrize("fixed", [False, True])
def test_parquet_carries_other_columns_and_records_settings(tmp_path, capsys, fixed):
    x = random_rows(500, 40)
    table = embedding_table(x, fixed)
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=150)
    before = digest(tmp_path / "in.parquet")
    code, _, err = run_cli(
        capsys,
        "project",
        tmp_path / "in.parquet",
        tmp_path / "out.parquet",
        "--dim",
        12,
        "--seed",
        9,
        "--batch-rows",
        64,
    )
    assert code == 0, err
    result = pq.read_table(tmp_path / "out.parquet")
    assert result.column_names == ["id", "text", "emb"]
    assert result.column("id").equals(table.column("id")) and result.column("text").equals(table.column("text"))
    assert result.schema.field("emb").type == pa.list_(pa.float32(), 12)
    assert_projection_equal(parquet_matrix(tmp_path / "out.parquet", "emb"), expected(x, 12, 9))
    settings = read_provenance(tmp_path / "out.parquet")
    assert settings["seed"] == 9 and settings["out_features"] == 12 and settings["column"] == "emb"
    assert settings["input_shape"] == [500, 40] and settings["spec_version"] == sjlt.SPEC_VERSION
    assert result.schema.metadata[b"owner"] == b"test"
    assert digest(tmp_path / "in.parquet") == before
    assert leftovers(tmp_path) == []


def test_parquet_column_flag_picks_among_several(tmp_path, capsys):
    x, other = random_rows(50, 10), random_rows(50, 6)
    pq.write_table(pa.table({"a": pa.array(list(x)), "b": pa.array(list(other))}), tmp_path / "in.parquet")
    code, _, err = run_cli(capsys, "project", tmp_path / "in.parquet", tmp_path / "out.parquet", "--dim", 3)
    assert code == 1
    assert_one_error_line(err, "several embedding columns", "--column")
    code, _, err = run_cli(
        capsys, "project", tmp_path / "in.parquet", tmp_path / "out.parquet", "--dim", 3, "--column", "b", "-q"
    )
    assert code == 0, err
    assert_projection_equal(parquet_matrix(tmp_path / "out.parquet", "b"), expected(other, 3, 0))
    np.testing.assert_array_equal(parquet_matrix(tmp_path / "out.parquet", "a"), x)


def test_npy_to_parquet_and_parquet_to_npy(tmp_path, capsys):
    x = random_rows(80, 16, np.float64)
    np.save(tmp_path / "in.npy", x)
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "mid.parquet", "--dim", 5, "-q")
    assert code == 0, err
    assert pq.read_schema(tmp_path / "mid.parquet").field("embedding").type == pa.list_(pa.float64(), 5)
    assert_projection_equal(parquet_matrix(tmp_path / "mid.parquet", "embedding"), expected(x, 5, 0))

    code, _, err = run_cli(
        capsys, "project", tmp_path / "in.npy", tmp_path / "named.parquet", "--dim", 5, "--column", "vector", "-q"
    )
    assert code == 0, err
    assert pq.read_schema(tmp_path / "named.parquet").names == ["vector"]
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "o.npy", "--dim", 5, "--column", "vector")
    assert code == 1
    assert_one_error_line(err, "both .npy", "drop --column")

    pq.write_table(embedding_table(random_rows(30, 16), fixed=False), tmp_path / "tab.parquet")
    code, out, err = run_cli(capsys, "project", tmp_path / "tab.parquet", tmp_path / "tab.npy", "--dim", 5)
    assert code == 0, err
    assert np.load(tmp_path / "tab.npy").shape == (30, 5)
    assert "columns id, text were not written" in err


def test_directory_and_glob_inputs_give_one_output_per_file(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    inputs = {}
    for i in range(3):
        x = random_rows(40 + i, 12)
        inputs[f"part{i}.parquet"] = x
        pq.write_table(embedding_table(x, fixed=False), tmp_path / "in" / f"part{i}.parquet")
    (tmp_path / "in" / "notes.txt").write_text("not an input")
    code, out, err = run_cli(capsys, "project", tmp_path / "in", tmp_path / "out", "--dim", 4)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(inputs)
    for name, x in inputs.items():
        assert_projection_equal(parquet_matrix(tmp_path / "out" / name, "emb"), expected(x, 4, 0))
    assert "3 files" in out and "123 rows" in out

    code, _, err = run_cli(
        capsys, "project", str(tmp_path / "in" / "part[01].parquet"), tmp_path / "globbed", "--dim", 4, "-q"
    )
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "globbed").iterdir()) == ["part0.parquet", "part1.parquet"]


def test_existing_output_needs_overwrite_and_input_is_never_the_output(tmp_path, capsys):
    x = random_rows(20, 8)
    np.save(tmp_path / "in.npy", x)
    assert run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 4, "--seed", 5, "-q")[0] == 0
    previous = digest(tmp_path / "out.npy")
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 4)
    assert code == 1
    assert_one_error_line(err, "already exists", "--overwrite")
    assert digest(tmp_path / "out.npy") == previous

    code, _, err = run_cli(
        capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 4, "--overwrite", "-q"
    )
    assert code == 0, err
    assert_projection_equal(np.load(tmp_path / "out.npy"), expected(x, 4, 0))

    before = digest(tmp_path / "in.npy")
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "in.npy", "--dim", 4, "--overwrite")
    assert code == 1
    assert_one_error_line(err, "is the INPUT file")
    assert digest(tmp_path / "in.npy") == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_gpu_pinned_pipeline_matches_cpu(tmp_path, capsys, suffix):
    x = random_rows(5000, 96)
    if suffix == ".npy":
        np.save(tmp_path / f"in{suffix}", x)
    else:
        pq.write_table(embedding_table(x, fixed=True), tmp_path / f"in{suffix}")
    for device in ("cpu", "cuda"):
        code, _, err = run_cli(
            capsys,
            "project",
            tmp_path / f"in{suffix}",
            tmp_path / f"{device}.npy",
            "--dim",
            32,
            "--device",
            device,
            "--batch-rows",
            700,
            "-q",
        )
        assert code == 0, err
    # The Triton kernel may round differently from the CPU reference; same matrix, same sums.
    np.testing.assert_allclose(np.load(tmp_path / "cuda.npy"), np.load(tmp_path / "cpu.npy"), rtol=1e-2, atol=1e-2)


# ----------------------------------------------------------------------------------------------
# errors: one line, exit 1, no output, no temporary file
# ----------------------------------------------------------------------------------------------


def _expect_failure(capsys, tmp_path, input_path, *fragments, extra=()):
    code, out, err = run_cli(capsys, "project", input_path, tmp_path / "out.npy", "--dim", 4, *extra)
    assert code == 1
    assert_one_error_line(err, *fragments)
    assert not (tmp_path / "out.npy").exists() and not (tmp_path / "out.npy.json").exists()
    assert leftovers(tmp_path) == []
    return err


def test_missing_input(tmp_path, capsys):
    _expect_failure(capsys, tmp_path, tmp_path / "nope.npy", "does not exist", "check the path")


def test_unreadable_npy(tmp_path, capsys):
    (tmp_path / "bad.npy").write_bytes(b"this is not numpy at all")
    _expect_failure(capsys, tmp_path, tmp_path / "bad.npy", "not a readable .npy file", "numpy.save")


def test_truncated_npy(tmp_path, capsys):
    np.save(tmp_path / "cut.npy", random_rows(100, 8))
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-50])
    _expect_failure(capsys, tmp_path, tmp_path / "cut.npy", "truncated")


def test_unreadable_parquet(tmp_path, capsys):
    (tmp_path / "bad.parquet").write_bytes(np.random.default_rng().bytes(1000))
    _expect_failure(capsys, tmp_path, tmp_path / "bad.parquet", "not a readable parquet file")


def test_unknown_extension(tmp_path, capsys):
    (tmp_path / "data.csv").write_text("1,2,3\n")
    _expect_failure(capsys, tmp_path, tmp_path / "data.csv", "cannot tell the format", ".npy or .parquet")


def test_one_dimensional_array(tmp_path, capsys):
    np.save(tmp_path / "vec.npy", random_rows(1, 30)[0])
    _expect_failure(capsys, tmp_path, tmp_path / "vec.npy", "1-D array", "reshape(1, -1)")


def test_integer_array(tmp_path, capsys):
    np.save(tmp_path / "ints.npy", np.random.default_rng().integers(0, 9, (10, 8)))
    _expect_failure(capsys, tmp_path, tmp_path / "ints.npy", "int64", "float32")


def test_ragged_parquet_column(tmp_path, capsys):
    rows = [list(v) for v in random_rows(30, 8)]
    rows[17] = rows[17][:5]
    pq.write_table(pa.table({"emb": pa.array(rows, pa.list_(pa.float32()))}), tmp_path / "ragged.parquet")
    _expect_failure(capsys, tmp_path, tmp_path / "ragged.parquet", "ragged", "row 17", "same length")


def test_parquet_without_embedding_column(tmp_path, capsys):
    pq.write_table(pa.table({"id": pa.array(np.arange(5))}), tmp_path / "plain.parquet")
    _expect_failure(capsys, tmp_path, tmp_path / "plain.parquet", "no list-of-floats column", "id (int64)")


def test_parquet_integer_lists(tmp_path, capsys):
    pq.write_table(pa.table({"emb": pa.array([[1, 2], [3, 4]])}), tmp_path / "ints.parquet")
    _expect_failure(capsys, tmp_path, tmp_path / "ints.parquet", "lists of int64", extra=("--column", "emb"))


def test_parquet_null_embedding(tmp_path, capsys):
    rows = [list(v) for v in random_rows(10, 4)]
    rows[6] = None
    pq.write_table(pa.table({"emb": pa.array(rows, pa.list_(pa.float32()))}), tmp_path / "nulls.parquet")
    _expect_failure(capsys, tmp_path, tmp_path / "nulls.parquet", "null", "row 6")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_row_in_batch_three_is_refused_unless_allowed(tmp_path, capsys, bad):
    x = random_rows(100, 8)
    x[57, 3] = bad  # batch 3 of 20-row batches holds rows 40-59
    np.save(tmp_path / "in.npy", x)
    _expect_failure(
        capsys, tmp_path, tmp_path / "in.npy", "row 57", "batch 3", "--allow-nonfinite", extra=("--batch-rows", 20)
    )
    code, _, err = run_cli(
        capsys,
        "project",
        tmp_path / "in.npy",
        tmp_path / "out.npy",
        "--dim",
        4,
        "--batch-rows",
        20,
        "--allow-nonfinite",
        "-q",
    )
    assert code == 0, err
    y = np.load(tmp_path / "out.npy")
    assert not np.isfinite(y[57]).all() and np.isfinite(np.delete(y, 57, axis=0)).all()


def test_float16_overflow_is_reported_as_such(tmp_path, capsys):
    x = np.full((4, 64), 60000.0, dtype=np.float16)  # sums of same-signed entries overflow float16
    x *= np.sign(random_rows(4, 64)).astype(np.float16) ** 2
    np.save(tmp_path / "in.npy", x)
    _expect_failure(capsys, tmp_path, tmp_path / "in.npy", "overflows float16", "--dtype float32", extra=("--nnz", 1))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cuda_requested_without_gpu(tmp_path, capsys):
    np.save(tmp_path / "in.npy", random_rows(5, 4))
    _expect_failure(capsys, tmp_path, tmp_path / "in.npy", "--device cuda", "--device cpu", extra=("--device", "cuda"))


def test_debug_shows_the_traceback(tmp_path, capsys):
    code, _, err = run_cli(capsys, "project", tmp_path / "nope.npy", tmp_path / "out.npy", "--dim", 4, "--debug")
    assert code == 1
    assert "Traceback" in err and err.rstrip().splitlines()[-1].startswith("sjlt: error:")


def test_disk_full_midway_leaves_nothing(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "in.npy", random_rows(100, 8))
    real_write = npy_module.NpySink.write
    calls = []

    def write_until_full(self, projected, batch):
        calls.append(batch.index)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, projected, batch)

    monkeypatch.setattr(npy_module.NpySink, "write", write_until_full)
    _expect_failure(
        capsys, tmp_path, tmp_path / "in.npy", "no space left", "free some space", extra=("--batch-rows", 10)
    )
    assert len(calls) == 3


@pytest.mark.parametrize(
    "flags",
    [
        ["--dim", "0"],
        ["--dim", "x"],
        [],
        ["--dim", "4", "--seed", "-1"],
        ["--dim", "4", "--seed", str(2**64)],
        ["--dim", "4", "--nnz", "5"],
        ["--dim", "4", "--dtype", "int8"],
        ["--dim", "4", "--device", "tpu"],
        ["--dim", "4", "--batch-rows", "0"],
    ],
)
def test_invalid_flags_exit_2(tmp_path, capsys, flags):
    np.save(tmp_path / "in.npy", random_rows(5, 4))
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", *flags)
    assert exit_info.value.code == 2
    assert "usage: sjlt project" in capsys.readouterr().err
