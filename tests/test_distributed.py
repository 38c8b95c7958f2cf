"""sjlt.distributed across 2 CPU processes (gloo), against the unsharded single-process projection.

All scenarios run in one 2-rank process group, started once per module: each rank runs this file
as a script (``--rank``), tries every scenario in the same order, and saves either the scenario's
tensors or the exception it raised. The tests below then make their assertions on those results
in the pytest process, so an error on any rank surfaces as a test failure with its traceback. The
parent process serves the rendezvous store on an OS-chosen port of 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import sjlt
from sjlt.distributed import sparse_jl_row_sharded, sparse_jl_sharded

WORLD = 2
N_ROWS, WIDTHS, K = 5, (120, 83), 48  # uneven shards on purpose
D = sum(WIDTHS)
# Generous: a rank that starts late under load (-n 8 on a busy host: 12 s for both ranks to start
# and run every scenario) waits for the other at its first collective; a bound tight enough to
# trip there fails the test without any bug.
COLLECTIVE_TIMEOUT_S = 120
RUN_TIMEOUT_S = 300


# ------------------------------------------------------------------------------------------------
# Scenarios: run on every rank, in this order, by the worker processes.
# ------------------------------------------------------------------------------------------------


def _full_input(data_seed: int, dtype=torch.float64, rows: int = N_ROWS, cols: int = D):
    """The same random X on every rank (drawn from the shared data seed)."""
    generator = torch.Generator().manual_seed(data_seed)
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64).to(dtype)


def _my_columns(rank: int) -> tuple[int, int]:
    start = sum(WIDTHS[:rank])
    return start, start + WIDTHS[rank]


def _forward(rank, data_seed, dtype, check=True):
    x = _full_input(data_seed, dtype)
    start, stop = _my_columns(rank)
    y = sparse_jl_sharded(x[:, start:stop], K, seed=data_seed + 1, column_offset=start, check=check)
    return {"sharded": y, "unsharded": sjlt.sparse_jl(x, K, seed=data_seed + 1)}


def scenario_forward_float64(rank, data_seed):
    return _forward(rank, data_seed, torch.float64)


def scenario_forward_float32_unchecked(rank, data_seed):
    return _forward(rank, data_seed, torch.float32, check=False)


def scenario_forward_bfloat16(rank, data_seed):
    return _forward(rank, data_seed, torch.bfloat16)


def scenario_forward_complex64(rank, data_seed):
    x = torch.complex(_full_input(data_seed, torch.float32), _full_input(data_seed + 7, torch.float32))
    start, stop = _my_columns(rank)
    y = sparse_jl_sharded(x[:, start:stop], K, seed=data_seed + 1, column_offset=start)
    return {"sharded": y, "unsharded": sjlt.sparse_jl(x, K, seed=data_seed + 1)}


def scenario_forward_offset_start_and_3d(rank, data_seed):
    """Shards of columns [base, base + D) of a (2, 3, D) input: the range need not start at 0."""
    base = 2**40 + 17
    x = _full_input(data_seed, torch.float64, rows=6).reshape(2, 3, D)
    start, stop = _my_columns(rank)
    y = sparse_jl_sharded(x[..., start:stop], K, seed=data_seed + 2, nnz=3, column_offset=base + start)
    return {"sharded": y, "unsharded": sjlt.sparse_jl(x, K, seed=data_seed + 2, nnz=3, column_offset=base)}


def scenario_forward_empty_shard(rank, data_seed):
    """Rank 1 holds no columns; rank 0 holds them all."""
    x = _full_input(data_seed, torch.float64)
    shard = x if rank == 0 else x[:, :0]
    y = sparse_jl_sharded(shard, K, seed=data_seed + 3, column_offset=0 if rank == 0 else 5)
    return {"sharded": y, "unsharded": sjlt.sparse_jl(x, K, seed=data_seed + 3)}


def scenario_backward(rank, data_seed):
    """Gradient of a nonlinear loss of the replicated output, against unsharded autograd."""
    x = _full_input(data_seed, torch.float64)
    weights = _full_input(data_seed + 11, torch.float64, cols=K)
    start, stop = _my_columns(rank)
    shard = x[:, start:stop].clone().requires_grad_(True)
    y = sparse_jl_sharded(shard, K, seed=data_seed + 4, column_offset=start)
    (torch.tanh(y) * weights).sum().backward()

    whole = x.clone().requires_grad_(True)
    (torch.tanh(sjlt.sparse_jl(whole, K, seed=data_seed + 4)) * weights).sum().backward()
    return {"sharded": shard.grad, "unsharded": whole.grad[:, start:stop]}


def scenario_subgroup(rank, data_seed):
    """group=: each rank, in a group of its own, holds all columns; the world group would double them."""
    groups = [dist.new_group([r]) for r in range(WORLD)]  # every rank must create every group
    x = _full_input(data_seed, torch.float64)
    y = sparse_jl_sharded(x, K, seed=data_seed + 5, column_offset=0, group=groups[rank])
    return {"sharded": y, "unsharded": sjlt.sparse_jl(x, K, seed=data_seed + 5)}


def _sharded_with(
    rank,
    data_seed,
    *,
    offsets=(0, WIDTHS[0]),
    seeds=None,
    ks=(K, K),
    nnzs=(None, None),
    rows=(N_ROWS, N_ROWS),
    dtypes=(torch.float64, torch.float64),
):
    x = _full_input(data_seed, dtypes[rank], rows=rows[rank])
    start, stop = _my_columns(rank)
    seed = seeds[rank] if seeds else data_seed
    return sparse_jl_sharded(x[:, start:stop], ks[rank], seed=seed, nnz=nnzs[rank], column_offset=offsets[rank])


def scenario_overlap(rank, data_seed):
    return _sharded_with(rank, data_seed, offsets=(0, WIDTHS[0] - 10))


def scenario_gap(rank, data_seed):
    return _sharded_with(rank, data_seed, offsets=(0, WIDTHS[0] + 20))


def scenario_seed_mismatch(rank, data_seed):
    # The seeds differ only in their high 32 bits, and the top bit is set.
    return _sharded_with(rank, data_seed, seeds=(2**64 - 1, 2**64 - 1 - 2**32))


def scenario_low_seed_mismatch(rank, data_seed):
    return _sharded_with(rank, data_seed, seeds=(5, 6))


def scenario_out_features_mismatch(rank, data_seed):
    return _sharded_with(rank, data_seed, ks=(K, K + 1))


def scenario_nnz_mismatch(rank, data_seed):
    return _sharded_with(rank, data_seed, nnzs=(2, 4))


def scenario_rows_mismatch(rank, data_seed):
    return _sharded_with(rank, data_seed, rows=(N_ROWS, N_ROWS + 1))


def scenario_dtype_mismatch(rank, data_seed):
    return _sharded_with(rank, data_seed, dtypes=(torch.float64, torch.float32))


def scenario_bad_group(rank, data_seed):
    x = _full_input(data_seed)
    return sparse_jl_sharded(x, K, seed=1, column_offset=0, group="world")


def scenario_row_sharded(rank, data_seed):
    """Each rank projects its own rows, with the check; stacked, they give the full projection."""
    x = _full_input(data_seed, torch.float32, rows=2 * N_ROWS)
    mine = x[rank * N_ROWS : (rank + 1) * N_ROWS]
    y = sparse_jl_row_sharded(mine, K, seed=data_seed + 6, check=True)
    gathered = [torch.empty_like(y) for _ in range(WORLD)]
    dist.all_gather(gathered, y)

    # The matrix itself, compared across ranks through a digest of its COO entries, and the
    # projection of the same probe vector on each rank.
    matrix = sjlt.sparse_jl_matrix(D, K, seed=data_seed + 6)
    digest = hashlib.sha256(matrix.indices().numpy().tobytes() + matrix.values().numpy().tobytes()).hexdigest()
    digests = [None] * WORLD
    dist.all_gather_object(digests, digest)
    probe = sparse_jl_row_sharded(_full_input(12345, torch.float32, rows=1), K, seed=data_seed + 6)
    probes = [torch.empty_like(probe) for _ in range(WORLD)]
    dist.all_gather(probes, probe)
    return {
        "sharded": torch.cat(gathered),
        "unsharded": sjlt.sparse_jl(x, K, seed=data_seed + 6),
        "digests": digests,
        "probes": probes,
    }


def scenario_row_sharded_seed_mismatch(rank, data_seed):
    x = _full_input(data_seed, torch.float32)
    return sparse_jl_row_sharded(x, K, seed=data_seed + rank, check=True)


def scenario_row_sharded_width_mismatch(rank, data_seed):
    x = _full_input(data_seed, torch.float32, cols=D + rank)
    return sparse_jl_row_sharded(x, K, seed=data_seed, check=True)


SCENARIOS = {name[len("scenario_") :]: fn for name, fn in list(globals().items()) if name.startswith("scenario_")}


def _worker_main(rank: int, port: int, data_seed: int, out_dir: Path) -> None:
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=WORLD, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    )
    results = {}
    for name, scenario in SCENARIOS.items():
        try:
            results[name] = {"value": scenario(rank, data_seed)}
        except Exception as error:  # recorded for the test to judge, never swallowed
            import traceback

            results[name] = {"error": type(error).__name__, "message": str(error), "traceback": traceback.format_exc()}
    dist.barrier()
    dist.destroy_process_group()
    torch.save(results, out_dir / f"rank{rank}.pt")


# ------------------------------------------------------------------------------------------------
# The pytest side.
# ------------------------------------------------------------------------------------------------


def _child_env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if any(name == "lo" for _, name in socket.if_nameindex()):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo's traffic on the loopback interface
    return env


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("distributed")
    data_seed = int.from_bytes(os.urandom(4), "little")
    server = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    )
    procs, logs = [], []
    for rank in range(WORLD):
        log = open(out_dir / f"rank{rank}.log", "w+")
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, str(rank), str(server.port), str(data_seed), str(out_dir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_env(),
            )
        )
    try:
        for proc in procs:
            proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
            proc.wait()
    output = []
    for rank, log in enumerate(logs):
        log.seek(0)
        output.append(f"--- rank {rank} (exit {procs[rank].returncode}) ---\n{log.read()}")
        log.close()
    del server
    if any(proc.returncode != 0 for proc in procs):
        pytest.fail(f"a distributed worker failed (data seed {data_seed}):\n" + "\n".join(output))
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]


def _values(results, name):
    """The scenario's value on each rank; a rank that raised fails the test with its traceback."""
    values = []
    for rank, per_rank in enumerate(results):
        outcome = per_rank[name]
        if "error" in outcome:
            pytest.fail(f"rank {rank} raised in scenario {name}:\n{outcome['traceback']}")
        values.append(outcome["value"])
    return values


def _errors(results, name):
    """The exception every rank raised in the scenario; fails if any rank did not raise."""
    errors = []
    for rank, per_rank in enumerate(results):
        outcome = per_rank[name]
        if "error" not in outcome:
            pytest.fail(f"rank {rank} did not raise in scenario {name}")
        errors.append(outcome)
    assert len({(e["error"], e["message"]) for e in errors}) == 1, f"ranks raised different errors: {errors}"
    return errors[0]


def _assert_sharded_matches(results, name, *, replicated=True, **tolerance):
    values = _values(results, name)
    for rank, value in enumerate(values):
        torch.testing.assert_close(
            value["sharded"], value["unsharded"], **tolerance, msg=lambda m: f"rank {rank}, scenario {name}: {m}"
        )
    if not replicated:
        return
    # Replicated output: every rank holds the same tensor, bit for bit.
    for value in values[1:]:
        assert torch.equal(value["sharded"], values[0]["sharded"])


@pytest.mark.parametrize(
    "name",
    [
        "forward_float64",
        "forward_float32_unchecked",
        "forward_complex64",
        "forward_offset_start_and_3d",
        "forward_empty_shard",
        "subgroup",
    ],
)
def test_column_sharded_projection_equals_unsharded(results, name):
    _assert_sharded_matches(results, name)


def test_column_sharded_bfloat16_within_rounding(results):
    values = _values(results, "forward_bfloat16")
    assert values[0]["sharded"].dtype == torch.bfloat16
    # Each rank rounds its partial to bfloat16 once and the sum is rounded once more.
    _assert_sharded_matches(results, "forward_bfloat16", rtol=2**-6, atol=2**-6)


def test_column_sharded_backward_equals_unsharded_gradient(results):
    # Each rank compares the gradient of its own columns.
    _assert_sharded_matches(results, "backward", replicated=False)


@pytest.mark.parametrize(
    "name, words",
    [
        ("overlap", ["overlap", "rank 0 holds columns [0, 120)", "rank 1 holds [110, 193)"]),
        ("gap", ["columns [120, 140) belong to no rank"]),
        ("seed_mismatch", ["seed", str(2**64 - 1), str(2**64 - 1 - 2**32)]),
        ("low_seed_mismatch", ["seed", "rank 0: 5", "rank 1: 6"]),
        ("out_features_mismatch", ["out_features", f"rank 1: {K + 1}"]),
        ("nnz_mismatch", ["nnz", "rank 0: 2", "rank 1: 4"]),
        ("rows_mismatch", ["number of rows", f"rank 1: {N_ROWS + 1}"]),
        ("dtype_mismatch", ["dtype", "torch.float32"]),
        ("row_sharded_seed_mismatch", ["seed"]),
        ("row_sharded_width_mismatch", ["in_features", f"rank 1: {D + 1}"]),
    ],
)
def test_inconsistent_layouts_raise_on_every_rank(results, name, words):
    error = _errors(results, name)
    assert error["error"] == "ValueError", error["traceback"]
    for word in words:
        assert word in error["message"], error["message"]


def test_bad_group_is_rejected(results):
    error = _errors(results, "bad_group")
    assert error["error"] == "TypeError" and "ProcessGroup" in error["message"]


def test_row_sharded_ranks_share_one_matrix(results):
    _assert_sharded_matches(results, "row_sharded")
    for value in _values(results, "row_sharded"):
        assert len(set(value["digests"])) == 1, value["digests"]
        assert torch.equal(value["probes"][0], value["probes"][1])


# Single-process checks: no process group needed.


def test_sharded_without_process_group_raises(rng):
    x = torch.randn(3, 10, generator=rng)
    with pytest.raises(RuntimeError, match="init_process_group"):
        sparse_jl_sharded(x, 8, seed=1, column_offset=0)
    with pytest.raises(RuntimeError, match="init_process_group"):
        sparse_jl_row_sharded(x, 8, seed=1, check=True)


def test_row_sharded_without_check_is_plain_sparse_jl(rng):
    x = torch.randn(3, 10, generator=rng)
    assert torch.equal(sparse_jl_row_sharded(x, 8, seed=9), sjlt.sparse_jl(x, 8, seed=9))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(seed=-1, column_offset=0), ValueError, "seed"),
        (dict(seed="1", column_offset=0), TypeError, "seed"),
        (dict(seed=1, column_offset=-3), ValueError, "column_offset"),
        (dict(seed=1, column_offset=0, nnz=99), ValueError, "nnz"),
    ],
)
def test_bad_arguments_raise_before_any_communication(rng, kwargs, error, match):
    x = torch.randn(3, 10, generator=rng)
    with pytest.raises(error, match=match):
        sparse_jl_sharded(x, 8, **kwargs)


def test_benchmark_script_runs_its_correctness_check_on_cpu(tmp_path):
    """benchmarks/bench_distributed.py under torchrun, gloo, tiny sizes: it must pass and write its table."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_distributed.py"
    out = tmp_path / "table.md"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={WORLD}",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:0",  # port 0: the OS picks a free one
        str(script),
        "--backend",
        "gloo",
        "--small",
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=_child_env())
    assert done.returncode == 0, done.stdout + done.stderr
    table = out.read_text()
    assert "-> PASS" in table and "identical on all 2 ranks: True" in table, table
    assert table.count("\n| ") == 5, table  # header + 4 timed configurations
    assert "NCCL_NVLS_ENABLE=0" in table and "TORCH_SYMM_MEM_DISABLE_MULTICAST=1" in table


if __name__ == "__main__":
    _worker_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
