"""sjlt.io as a library: its public names, its exception type, and the host<->device pipeline."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import sjlt
import sjlt.io
from sjlt.io import FileProjectionError, Settings, project_file, read_provenance
from sjlt.io.rows import DeviceStream, project_rows, tensor_view


def _rows(n=50, d=24, dtype=np.float32):
    return np.random.default_rng(1).standard_normal((n, d)).astype(dtype)


def test_importing_the_layer_is_cheap():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sjlt.io; heavy = [m for m in "
            "('torch', 'numpy', 'pyarrow') if m in sys.modules]; assert not heavy, heavy",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_public_names_resolve():
    for name in sjlt.io.__all__:
        assert getattr(sjlt.io, name) is not None


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_project_file_records_its_provenance(tmp_path, suffix):
    x = _rows()
    np.save(tmp_path / "in.npy", x)
    result = project_file(tmp_path / "in.npy", tmp_path / f"out{suffix}", Settings(out_features=8, seed=5))
    assert result.rows == 50 and result.in_features == 24 and result.out_features == 8
    record = read_provenance(tmp_path / f"out{suffix}")
    assert record["seed"] == 5 and record["out_features"] == 8 and record["input_shape"] == [50, 24]
    assert record["spec_version"] == sjlt.SPEC_VERSION


def test_read_provenance_of_files_sjlt_did_not_write(tmp_path):
    np.save(tmp_path / "plain.npy", _rows())
    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "plain.parquet")
    assert read_provenance(tmp_path / "plain.npy") is None
    assert read_provenance(tmp_path / "plain.parquet") is None


def test_errors_are_the_library_type_not_the_cli_type(tmp_path):
    with pytest.raises(FileProjectionError, match="No such file"):
        project_file(tmp_path / "missing.npy", tmp_path / "out.npy", Settings(out_features=4))
    np.save(tmp_path / "in.npy", _rows())
    project_file(tmp_path / "in.npy", tmp_path / "out.npy", Settings(out_features=4))
    with pytest.raises(FileProjectionError, match="--overwrite"):
        project_file(tmp_path / "in.npy", tmp_path / "out.npy", Settings(out_features=4))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("rows_per_chunk", [None, 7, 50, 1000])
def test_project_rows_equals_sparse_jl(dtype, rows_per_chunk):
    x = _rows(dtype=dtype)
    expected = sjlt.sparse_jl(torch.from_numpy(x), 16, seed=3, nnz=2).numpy()
    got, all_finite = project_rows(x, 16, seed=3, nnz=2, device=torch.device("cpu"), rows_per_chunk=rows_per_chunk)
    assert got.dtype == dtype and got.shape == (50, 16) and all_finite
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("rows_per_chunk", [None, 7])
def test_project_rows_widens_on_the_device_and_reports_non_finite_output(rows_per_chunk):
    x = _rows(dtype=np.float16)
    expected = sjlt.sparse_jl(torch.from_numpy(x).float(), 16, seed=3, nnz=2).numpy()
    got, all_finite = project_rows(
        x, 16, seed=3, nnz=2, device=torch.device("cpu"), rows_per_chunk=rows_per_chunk, output_dtype=np.float32
    )
    assert got.dtype == np.float32 and all_finite
    np.testing.assert_array_equal(got, expected)
    x[41, 5] = np.inf
    got, all_finite = project_rows(x, 16, seed=3, nnz=2, device=torch.device("cpu"), rows_per_chunk=rows_per_chunk)
    assert not all_finite and np.isfinite(np.delete(got, 41, axis=0)).all()


def test_project_rows_takes_read_only_and_reversed_arrays_without_a_warning(recwarn):
    x = _rows()
    x.flags.writeable = False
    reversed_rows = x[::-1]
    got, _ = project_rows(reversed_rows, 8, seed=0, nnz=8, device=torch.device("cpu"))
    np.testing.assert_array_equal(got, sjlt.sparse_jl(torch.from_numpy(x[::-1].copy()), 8, seed=0).numpy())
    assert tensor_view(x).data_ptr() == x.ctypes.data  # a view, not a copy
    assert not [w for w in recwarn if "not writable" in str(w.message)]


@pytest.mark.parametrize("mapped", [True, False], ids=["through-maps", "by-pwrite"])
def test_npy_batches_are_read_and_written_in_concurrent_slices(tmp_path, monkeypatch, mapped):
    import sjlt.io.npy as npy

    if mapped and not npy._MAPPED_WRITES:
        pytest.skip("this platform cannot reserve space for a file (no posix_fallocate)")
    monkeypatch.setattr(npy, "_MAPPED_WRITES", mapped)
    monkeypatch.setattr(npy, "RESERVE_BYTES", 5000)  # pieces that end inside batches
    monkeypatch.setattr(npy, "MAP_SLICE_BYTES", 1000)
    monkeypatch.setattr(npy, "SLICE_BYTES", 1000)  # not a multiple of a row: slices split rows
    monkeypatch.setattr(npy, "_SLICE_THREADS", 3)
    x = _rows(n=300, d=40)
    np.save(tmp_path / "in.npy", x)
    project_file(tmp_path / "in.npy", tmp_path / "out.npy", Settings(out_features=64, seed=4, batch_rows=70))
    expected = sjlt.sparse_jl(torch.from_numpy(x), 64, seed=4).numpy()  # 70 x 64 x 4 bytes: 18 slices a batch
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)
    short = tmp_path / "short.bin"
    short.write_bytes(bytes(2500))
    with open(short, "rb", buffering=0) as f, pytest.raises(FileProjectionError, match="ended early"):
        npy._read_exactly(f, memoryview(bytearray(4000)), 0)


def _fallocate_failing_with(code):
    def fallocate(fd, offset, length):
        raise OSError(code, os.strerror(code))

    return fallocate


def test_npy_output_is_written_without_maps_where_space_cannot_be_reserved(tmp_path, monkeypatch):
    import sjlt.io.npy as npy

    if not npy._MAPPED_WRITES:
        pytest.skip("this platform writes by position only")
    monkeypatch.setattr(npy.os, "posix_fallocate", _fallocate_failing_with(errno.EOPNOTSUPP))
    monkeypatch.setattr(npy.mmap, "mmap", None)  # a map would fail: the fallback must not make one
    x = _rows(n=300, d=40)
    np.save(tmp_path / "in.npy", x)
    project_file(tmp_path / "in.npy", tmp_path / "out.npy", Settings(out_features=64, seed=4, batch_rows=70))
    np.testing.assert_array_equal(
        np.load(tmp_path / "out.npy"), sjlt.sparse_jl(torch.from_numpy(x), 64, seed=4).numpy()
    )


@pytest.mark.parametrize("full_from", [0, 10 * 4096], ids=["at-the-start", "at-the-third-batch"])
def test_a_full_disk_when_reserving_the_output_fails_cleanly(tmp_path, monkeypatch, full_from):
    import sjlt.io.npy as npy

    if not npy._MAPPED_WRITES:
        pytest.skip("this platform writes by position only")
    real = os.posix_fallocate

    def fallocate(fd, offset, length):
        if offset >= full_from:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(npy.os, "posix_fallocate", fallocate)
    monkeypatch.setattr(npy, "RESERVE_BYTES", 4096)  # 300 x 64 x 4 bytes: 19 pieces
    np.save(tmp_path / "in.npy", _rows(n=300, d=40))
    with pytest.raises(FileProjectionError, match="no space left.*free some space"):
        project_file(tmp_path / "in.npy", tmp_path / "out.npy", Settings(out_features=64, seed=4, batch_rows=70))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npy"]


def test_device_stream_returns_results_in_order_with_their_tags():
    stream = DeviceStream(lambda chunk: chunk * 2, torch.device("cpu"))
    out = torch.empty(2, 3)
    finished = stream.submit(torch.ones(2, 3), tag="a") + stream.submit(torch.ones(2, 3), "b", out=out)
    finished += stream.finish()
    finished += stream.submit(torch.tensor([[1.0, float("nan"), 0.0]]), tag="c")
    finished += stream.submit(torch.full((1, 3), 1.5e38), tag="d")  # finite, though its sum overflows
    assert [chunk.tag for chunk in finished] == ["a", "b", "c", "d"]
    assert [chunk.finite for chunk in finished] == [True, True, False, True]
    assert finished[1].result is out and torch.equal(out, torch.full((2, 3), 2.0))


def test_map_row_blocks_projects_each_row_chunk():
    da = pytest.importorskip("dask.array")
    from sjlt.io.blocks import map_row_blocks

    x = _rows(n=40, d=30)
    lazy = map_row_blocks(da.from_array(x, chunks=(15, 10)), 8, seed=2, nnz=8, device="cpu")
    assert lazy.chunks == ((15, 15, 10), (8,))
    np.testing.assert_allclose(
        lazy.compute(), sjlt.sparse_jl(torch.from_numpy(x), 8, seed=2).numpy(), rtol=1e-6, atol=1e-6
    )


def test_outputs_of_an_older_stream_spec_refuse_to_load(tmp_path):
    """An output whose record names another spec version is not this sjlt's matrix: reading its
    record says so and what to do; the overwrite rule still recognises it as sjlt's own."""
    import json

    import numpy as np

    from sjlt import spec

    np.save(tmp_path / "in.npy", np.random.default_rng(0).standard_normal((20, 32)).astype(np.float32))
    project_file(tmp_path / "in.npy", tmp_path / "out.npy", Settings(out_features=16, seed=1))
    sidecar = tmp_path / "out.npy.json"
    record = json.loads(sidecar.read_text())
    record["spec_version"] = 3  # v4 changed only the default nnz, which the record holds: same matrix
    sidecar.write_text(json.dumps(record))
    assert read_provenance(tmp_path / "out.npy")["nnz"] == record["nnz"]
    record["spec_version"] = 2  # v3 changed the windowed matrices
    sidecar.write_text(json.dumps(record))
    with pytest.raises(FileProjectionError, match="version 2.*project the input again"):
        read_provenance(tmp_path / "out.npy")
    assert read_provenance(tmp_path / "out.npy", current_spec=False)["spec_version"] == 2
    project_file(tmp_path / "in.npy", tmp_path / "out.npy", Settings(out_features=16, seed=1, overwrite=True))
    assert read_provenance(tmp_path / "out.npy")["spec_version"] == spec.SPEC_VERSION
    record = json.loads(sidecar.read_text())
    record.update(spec_version=4, out_features=4096, nnz=16)  # v5 redrew windowed matrices with nnz > 8
    sidecar.write_text(json.dumps(record))
    with pytest.raises(FileProjectionError, match="version 4.*project the input again"):
        read_provenance(tmp_path / "out.npy")
    for out_features in (10000, 16384):  # v7 changed only the default nnz beyond 8192 (16 -> 32)
        record.update(spec_version=6, out_features=out_features, nnz=16)
        sidecar.write_text(json.dumps(record))
        assert read_provenance(tmp_path / "out.npy")["nnz"] == 16
