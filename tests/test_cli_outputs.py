"""The batch path loses nothing: the overwrite rule, exclusive creation, size checks up front,
malformed .npy headers, evaluate's outputs, and no empty directories left by a failure."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from test_cli_helpers import assert_one_error_line, assert_projection_equal, digest, leftovers, random_rows, run_cli

import sjlt
from sjlt import _memory
from sjlt.io import project as project_module
from sjlt.io.npy import NpySink
from sjlt.io.project import Settings, project_file


def write_shard(path, rows: int = 30, features: int = 12) -> None:
    x = random_rows(rows, features)
    pq.write_table(pa.table({"id": np.arange(rows), "emb": pa.array(list(x))}), path)


def sidecar_seed(path) -> int:
    return json.loads((path.parent / (path.name + ".json")).read_text())["seed"]


# ----------------------------------------------------------------------------------------------
# 1. --overwrite replaces only files sjlt wrote
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [False, True])
def test_unquoted_glob_of_two_shards_never_replaces_the_second_shard(tmp_path, capsys, overwrite):
    """`sjlt project shards/*.parquet out --dim 8` with two shards: INPUT part-0, OUTPUT part-1."""
    write_shard(tmp_path / "part-0.parquet")
    write_shard(tmp_path / "part-1.parquet")
    before = digest(tmp_path / "part-1.parquet")
    code, _, err = run_cli(
        capsys,
        "project",
        tmp_path / "part-0.parquet",
        tmp_path / "part-1.parquet",
        "--dim",
        8,
        *(["--overwrite"] if overwrite else []),
    )
    assert code == 1
    assert_one_error_line(err, "not written by sjlt", "unquoted glob", "quote the pattern", f"'{tmp_path}/*.parquet'")
    assert "pass --overwrite" not in err
    assert digest(tmp_path / "part-1.parquet") == before
    assert sorted(os.listdir(tmp_path)) == ["part-0.parquet", "part-1.parquet"]


def test_three_unquoted_shards_get_the_glob_hint_too(tmp_path, capsys):
    for i in range(3):
        write_shard(tmp_path / f"part-{i}.parquet")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, "project", *(tmp_path / f"part-{i}.parquet" for i in range(3)), "--dim", 8)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and "quote it: sjlt project 'dir/*.parquet' OUT" in err


def test_overwrite_replaces_an_earlier_sjlt_output(tmp_path, capsys):
    np.save(tmp_path / "in.npy", random_rows(20, 8))
    pq.write_table(pa.table({"emb": pa.array(list(random_rows(20, 8)))}), tmp_path / "in.parquet")
    for out in ("out.npy", "out.parquet"):
        source = "in.npy" if out.endswith(".npy") else "in.parquet"
        assert run_cli(capsys, "project", tmp_path / source, tmp_path / out, "--dim", 4, "--seed", 1, "-q")[0] == 0
        code, _, err = run_cli(capsys, "project", tmp_path / source, tmp_path / out, "--dim", 4, "--seed", 2)
        assert code == 1
        assert_one_error_line(err, "already exists (an earlier sjlt output)", "pass --overwrite")
        code, _, err = run_cli(
            capsys, "project", tmp_path / source, tmp_path / out, "--dim", 4, "--seed", 2, "--overwrite", "-q"
        )
        assert code == 0, err
    assert sidecar_seed(tmp_path / "out.npy") == 2
    assert json.loads(pq.read_schema(tmp_path / "out.parquet").metadata[b"sjlt"])["seed"] == 2
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("case", ["no sidecar", "foreign sidecar", "sidecar of another shape", "foreign sidecar only"])
def test_npy_without_a_matching_sjlt_record_is_never_replaced(tmp_path, capsys, case):
    np.save(tmp_path / "in.npy", random_rows(20, 8))
    user = tmp_path / "data" / "out.npy"
    user.parent.mkdir()
    if case != "foreign sidecar only":
        np.save(user, random_rows(20, 4))  # the user's own array, shaped like a projection
    if case == "foreign sidecar" or case == "foreign sidecar only":
        (user.parent / "out.npy.json").write_text('{"note": "mine"}')
    if case == "sidecar of another shape":
        np.save(tmp_path / "other.npy", random_rows(7, 8))
        assert run_cli(capsys, "project", tmp_path / "other.npy", tmp_path / "p.npy", "--dim", 4, "-q")[0] == 0
        (user.parent / "out.npy.json").write_bytes((tmp_path / "p.npy.json").read_bytes())
    before = {p.name: digest(p) for p in user.parent.iterdir()}
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", user, "--dim", 4, "--overwrite")
    assert code == 1
    assert_one_error_line(err, "not written by sjlt", "delete the file yourself")
    assert {p.name: digest(p) for p in user.parent.iterdir()} == before


def test_evaluate_follows_the_same_overwrite_rule(tmp_path, capsys):
    np.save(tmp_path / "emb.npy", random_rows(60, 16))
    (tmp_path / "mine.json").write_text('{"my": "notes"}')
    code, out, err = run_cli(
        capsys, "evaluate", tmp_path / "emb.npy", "--dims", 4, "--json", tmp_path / "mine.json", "--overwrite"
    )
    assert code == 1 and out == ""
    assert_one_error_line(err, "--json", "not written by sjlt")
    assert (tmp_path / "mine.json").read_text() == '{"my": "notes"}'

    flags = ["--dims", 4, "--json", tmp_path / "r.json", "--plot", tmp_path / "r.png"]
    assert run_cli(capsys, "evaluate", tmp_path / "emb.npy", *flags)[0] == 0
    code, out, err = run_cli(capsys, "evaluate", tmp_path / "emb.npy", *flags)
    assert code == 1 and out == ""  # refused before any work
    assert_one_error_line(err, "already exists (an earlier sjlt output)", "--overwrite")
    code, _, err = run_cli(capsys, "evaluate", tmp_path / "emb.npy", *flags, "--seed", 3, "--overwrite")
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["seed"] == 3
    assert leftovers(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# 2. exactly one run creates an output; --overwrite gives one complete output
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_output_created_by_another_run_meanwhile_is_left_alone(tmp_path, capsys, monkeypatch, suffix):
    """The other run commits between this run's check and its commit (the race of two runs)."""
    np.save(tmp_path / "in.npy", random_rows(40, 8))
    target = tmp_path / f"out{suffix}"
    sink_class = NpySink if suffix == ".npy" else __import__("sjlt.io.parquet", fromlist=["x"]).ParquetSink
    real_close = sink_class.close

    def close_after_the_other_run(self):
        real_close(self)
        monkeypatch.setattr(sink_class, "close", real_close)
        project_file(tmp_path / "in.npy", target, Settings(out_features=4, seed=7))

    monkeypatch.setattr(sink_class, "close", close_after_the_other_run)
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", target, "--dim", 4, "--seed", 1)
    assert code == 1
    assert_one_error_line(err, "appeared while this run was writing it", "--overwrite")
    if suffix == ".npy":
        assert sidecar_seed(target) == 7  # the other run's data and the other run's sidecar
        assert_projection_equal(
            np.load(target), sjlt.sparse_jl(torch.from_numpy(np.load(tmp_path / "in.npy")), 4, seed=7).numpy()
        )
    else:
        assert json.loads(pq.read_schema(target).metadata[b"sjlt"])["seed"] == 7
    assert leftovers(tmp_path) == []


def _concurrent_runs(tmp_path, extra):
    np.save(tmp_path / "in.npy", random_rows(20_000, 64))
    command = [
        sys.executable,
        "-m",
        "sjlt",
        "project",
        str(tmp_path / "in.npy"),
        str(tmp_path / "out.npy"),
        "--dim",
        "16",
        "--batch-rows",
        "2000",
        "-q",
        *extra,
    ]
    runs = [subprocess.Popen(command + ["--seed", str(seed)], stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    return [(run.wait(timeout=120), run.stderr.read()) for run in runs]


def test_two_concurrent_runs_without_overwrite_exactly_one_creates_the_output(tmp_path):
    results = _concurrent_runs(tmp_path, [])
    assert sorted(code for code, _ in results) == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "already exists" in loser or "appeared while this run was writing it" in loser
    seed = sidecar_seed(tmp_path / "out.npy")
    x = torch.from_numpy(np.load(tmp_path / "in.npy"))
    assert_projection_equal(np.load(tmp_path / "out.npy"), sjlt.sparse_jl(x, 16, seed=seed).numpy())
    assert leftovers(tmp_path) == []


def test_two_concurrent_overwrite_runs_leave_one_consistent_output(tmp_path, capsys):
    np.save(tmp_path / "in.npy", random_rows(20_000, 64))
    assert run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 16, "-q")[0] == 0
    results = _concurrent_runs(tmp_path, ["--overwrite"])
    assert [code for code, _ in results] == [0, 0], results
    seed = sidecar_seed(tmp_path / "out.npy")
    assert seed in (1, 2)
    x = torch.from_numpy(np.load(tmp_path / "in.npy"))
    assert_projection_equal(np.load(tmp_path / "out.npy"), sjlt.sparse_jl(x, 16, seed=seed).numpy())
    assert leftovers(tmp_path) == []


def test_overwrite_commits_of_two_runs_never_interleave(tmp_path, capsys, monkeypatch):
    """Run B has replaced the .npy but not yet its sidecar when run A commits the same OUTPUT:
    A must wait for B's commit (the directory lock), so the result is one run's array with the
    same run's sidecar. Without the lock A would finish in between: A's array, B's sidecar."""
    from sjlt.io import atomic

    x = random_rows(40, 8)
    np.save(tmp_path / "in.npy", x)
    target = tmp_path / "out.npy"
    assert run_cli(capsys, "project", tmp_path / "in.npy", target, "--dim", 4, "-q")[0] == 0
    other: dict = {}

    class HookedOs:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def replace(source, destination):
            os.replace(source, destination)
            if str(destination) == str(target) and "thread" not in other:

                def run_a():
                    other["result"] = project_file(
                        tmp_path / "in.npy", target, Settings(out_features=4, seed=7, overwrite=True)
                    )

                other["thread"] = threading.Thread(target=run_a)
                other["thread"].start()
                other["thread"].join(timeout=3)
                other["finished_inside_b"] = not other["thread"].is_alive()

    monkeypatch.setattr(atomic, "os", HookedOs())
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", target, "--dim", 4, "--seed", 1, "--overwrite", "-q")
    other["thread"].join(timeout=60)
    assert code == 0, err
    assert "result" in other and not other["finished_inside_b"]
    seed = sidecar_seed(target)
    assert seed == 7  # A committed after B, whole
    assert_projection_equal(np.load(target), sjlt.sparse_jl(torch.from_numpy(x), 4, seed=seed).numpy())
    assert leftovers(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# 3. oversized requests are refused up front, naming the size and the flag
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def small_ram(monkeypatch):
    """Pretends the machine has 1 GiB of RAM available, so the checks trip on small inputs."""
    fake = _memory.DeviceMemory("RAM", 1 << 30, 2 << 30)
    monkeypatch.setattr(project_module, "host_memory", lambda: fake)
    monkeypatch.setattr("sjlt.cli.evaluate.host_memory", lambda: fake)


def test_huge_dim_is_refused_before_allocating(tmp_path, capsys):
    np.save(tmp_path / "in.npy", random_rows(100, 16))
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 10**9)
    assert code == 1
    assert_one_error_line(err, "--dim 1,000,000,000", "available", "smaller --dim")
    assert "unexpected" not in err and sorted(os.listdir(tmp_path)) == ["in.npy"]


def test_batch_rows_larger_than_memory_is_refused(tmp_path, capsys, small_ram):
    np.save(tmp_path / "in.npy", random_rows(20_000, 64))  # 5 MB, but 1.7 GB of outputs in flight
    code, _, err = run_cli(
        capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 4096, "--batch-rows", 20_000
    )
    assert code == 1
    assert_one_error_line(err, "--batch-rows", "1.0 GiB available", "or fewer")
    assert sorted(os.listdir(tmp_path)) == ["in.npy"]


def test_npy_output_larger_than_the_free_disk_is_refused(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "in.npy", random_rows(100, 16))
    monkeypatch.setattr(project_module.shutil, "disk_usage", lambda path: SimpleNamespace(free=1000))
    code, _, err = run_cli(capsys, "project", tmp_path / "in.npy", tmp_path / "out.npy", "--dim", 8)
    assert code == 1
    assert_one_error_line(err, "3.1 KiB", "1,000 bytes free")
    assert sorted(os.listdir(tmp_path)) == ["in.npy"]


def test_evaluate_sample_too_large_for_memory_is_refused(tmp_path, capsys, small_ram, monkeypatch):
    np.save(tmp_path / "emb.npy", random_rows(20_000, 8))
    code, out, err = run_cli(capsys, "evaluate", tmp_path / "emb.npy", "--sample", 200_000, "--dims", 4)
    assert code == 1 and out == ""
    assert_one_error_line(err, "--sample 200,000", "rows²", "1.0 GiB available", "or fewer")


def test_evaluate_huge_dims_is_refused_before_computing(tmp_path, capsys):
    np.save(tmp_path / "emb.npy", random_rows(100, 8))
    code, out, err = run_cli(capsys, "evaluate", tmp_path / "emb.npy", "--dims", 10**12)
    assert code == 1 and out == ""
    assert_one_error_line(err, "--dims 1,000,000,000,000", "available", "smaller --dims")


def test_evaluate_sample_below_the_minimum_names_sample(tmp_path, capsys):
    np.save(tmp_path / "emb.npy", random_rows(500, 8))
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, "evaluate", tmp_path / "emb.npy", "--sample", 5, "--dims", 4)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--sample 5 is too small" in err and "--sample 11" in err


@pytest.mark.parametrize(
    "function, name", [(sjlt.sparse_jl, "out_features"), (sjlt.sparse_jl_transpose, "in_features")]
)
def test_python_api_refuses_an_output_larger_than_the_device(function, name):
    x = torch.randn(3, 8)
    with pytest.raises(MemoryError, match=f"{name}=1,000,000,000,000") as error:
        function(x, 10**12, seed=0)
    assert isinstance(error.value, ValueError) and "TiB" in str(error.value)


# ----------------------------------------------------------------------------------------------
# 4. malformed .npy headers are bad input
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, fragments",
    [(b"(-2, 4)", ("negative dimension", "numpy.save")), (b"( 5, 4)", ("does not match its header", "80 more"))],
)
def test_npy_header_that_lies_about_its_shape(tmp_path, capsys, shape, fragments):
    np.save(tmp_path / "good.npy", random_rows(10, 4))
    (tmp_path / "bad.npy").write_bytes((tmp_path / "good.npy").read_bytes().replace(b"(10, 4)", shape))
    for command in (
        ["project", tmp_path / "bad.npy", tmp_path / "out.npy", "--dim", 2],
        ["evaluate", tmp_path / "bad.npy", "--dims", 2, "--neighbors", 2],
    ):
        code, _, err = run_cli(capsys, *command)
        assert code == 1
        assert_one_error_line(err, "bad.npy", *fragments)
    assert sorted(os.listdir(tmp_path)) == ["bad.npy", "good.npy"]


# ----------------------------------------------------------------------------------------------
# 5. evaluate checks its outputs before any work
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--plot", "nodir/x.png"], ("--plot", "does not exist", "create it first")),
        (["--json", "nodir/x.json"], ("--json", "does not exist")),
        (["--plot", "x.txt"], ("--plot", ".txt", ".png, .svg or .pdf")),
        (["--plot", "x.png", "--json", "x.png"], ("same file",)),
    ],
)
def test_evaluate_refuses_bad_output_paths_before_computing(tmp_path, capsys, monkeypatch, flags, fragments):
    np.save(tmp_path / "emb.npy", random_rows(60, 16))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        "sjlt.cli.evaluate.evaluate_sample", lambda *a, **k: pytest.fail("computed before checking the outputs")
    )
    code, out, err = run_cli(capsys, "evaluate", "emb.npy", "--dims", 4, *flags)
    assert code == 1 and out == ""
    assert_one_error_line(err, *fragments)
    assert sorted(os.listdir(tmp_path)) == ["emb.npy"]


@pytest.mark.parametrize("suffix", [".svg", ".pdf"])
def test_evaluate_plot_formats_carry_the_sjlt_mark(tmp_path, capsys, suffix):
    np.save(tmp_path / "emb.npy", random_rows(60, 16))
    plot = tmp_path / f"r{suffix}"
    assert run_cli(capsys, "evaluate", tmp_path / "emb.npy", "--dims", 4, "--plot", plot)[0] == 0
    code, _, err = run_cli(capsys, "evaluate", tmp_path / "emb.npy", "--dims", 4, "--plot", plot, "--overwrite")
    assert code == 0, err


# ----------------------------------------------------------------------------------------------
# 6. a failed directory run leaves no empty directory
# ----------------------------------------------------------------------------------------------


def test_failed_directory_runs_leave_no_directory(tmp_path, capsys, monkeypatch):
    (tmp_path / "in").mkdir()
    write_shard(tmp_path / "in" / "a.parquet")
    (tmp_path / "in" / "b.parquet").write_bytes(b"not parquet")  # fails validation
    code, _, err = run_cli(capsys, "project", tmp_path / "in", tmp_path / "out" / "deep", "--dim", 4)
    assert code == 1 and "not a readable parquet file" in err
    assert not (tmp_path / "out").exists()

    write_shard(tmp_path / "in" / "b.parquet")
    monkeypatch.setattr("sjlt.io.cluster._CONNECT_TIMEOUT", "1s")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, _, err = run_cli(
        capsys,
        "project",
        tmp_path / "in",
        tmp_path / "out" / "deep",
        "--dim",
        4,
        "--scheduler",
        f"tcp://127.0.0.1:{port}",
    )
    assert code == 1 and ("Dask scheduler" in err or "dask.distributed" in err), err
    assert not (tmp_path / "out").exists()

    def disk_full(self, projected, batch):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("sjlt.io.parquet.ParquetSink.write", disk_full)
    code, _, err = run_cli(capsys, "project", tmp_path / "in", tmp_path / "out" / "deep", "--dim", 4)
    assert code == 1 and "no space left" in err
    assert not (tmp_path / "out").exists()


def test_failed_run_keeps_an_existing_output_directory(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "b.parquet").write_bytes(b"not parquet")
    (tmp_path / "out").mkdir()
    code, _, _ = run_cli(capsys, "project", tmp_path / "in", tmp_path / "out", "--dim", 4)
    assert code == 1 and (tmp_path / "out").is_dir()
