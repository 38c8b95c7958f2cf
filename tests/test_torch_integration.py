"""sjlt inside torch's machinery: torch.compile without recompiles, CUDA-graph replays with fresh
masks, autocast like F.linear, seed state in state_dicts.

On CPU machines (CI) compile runs with the ``aot_eager`` backend and the kernels under the
interpreter; on a GPU machine the same tests use inductor and CUDA, and the CUDA-graph tests run.
"""

import io

import pytest
import torch
import torch._dynamo

import sjlt
from sjlt import functional as F
from sjlt import reference, spec

HAS_CUDA = torch.cuda.is_available()
COMPILE_BACKEND = "inductor" if HAS_CUDA else "aot_eager"
INCREMENT = 0x9E3779B97F4A7C15


def call_seed(seed: int, call: int) -> int:
    """The spec'd seed of call ``call`` of SeededDropout(seed=seed)."""
    return (seed + call * INCREMENT) % (1 << 64)


class MLP(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        self.inner = torch.nn.Linear(24, 48)
        self.drop = sjlt.SeededDropout(0.5, seed=seed)
        self.project = sjlt.SparseJL(48, 16, seed=3)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.out(self.project(self.drop(torch.relu(self.inner(x)))))


def train(model, step_fn, steps, data):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for x in data[:steps]:
        opt.zero_grad()
        loss = step_fn(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


@pytest.mark.parametrize("seed", [11, None, 2**64 - 5], ids=["seeded", "drawn", "seed-near-2**64"])
def test_twenty_compiled_training_steps_compile_once(seed, kernel_device):
    torch._dynamo.reset()
    torch.manual_seed(0)
    data = [torch.randn(8, 24, device=kernel_device) for _ in range(20)]
    model = MLP(seed).to(kernel_device)
    twin = MLP(seed).to(kernel_device)
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(model, fullgraph=True, backend=COMPILE_BACKEND)
    frames_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        torch.manual_seed(1)
        compiled_losses = train(model, compiled, 20, data)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames_before == 1
    torch.manual_seed(1)
    eager_losses = train(twin, twin, 20, data)
    if seed is not None:
        assert model.drop.calls == twin.drop.calls == 20
        assert model.drop.last_seed == call_seed(seed, 19)
    if COMPILE_BACKEND == "aot_eager" or seed is not None:
        # aot_eager draws with eager's generator calls; inductor's own RNG draws other (but equally
        # reproducible) seeds, so only seeded masks can be compared across the two there.
        torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-4, atol=1e-5)


def test_a_compiled_seeded_module_applies_the_mask_of_each_call_index(kernel_device, rng):
    torch._dynamo.reset()
    layer = sjlt.SeededDropout(0.5, seed=40).to(kernel_device)
    compiled = torch.compile(lambda t: layer(t) * 1, fullgraph=True, backend=COMPILE_BACKEND)
    x = torch.randn(6, 64, generator=rng).abs().add(0.1).to(kernel_device)
    for call in range(4):
        keep = reference.dropout_keep_mask(x.shape, 0.5, seed=call_seed(40, call)).to(kernel_device)
        assert torch.equal(compiled(x) != 0, keep), f"call {call}"


def test_manual_seed_makes_compiled_runs_reproducible(kernel_device):
    data = [torch.randn(8, 24, device=kernel_device) for _ in range(5)]
    runs = []
    for _ in range(2):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = MLP(None).to(kernel_device)
        runs.append(train(model, torch.compile(model, fullgraph=True, backend=COMPILE_BACKEND), 5, data))
    assert torch.equal(runs[0], runs[1])


def test_each_call_of_a_seeded_module_applies_the_mask_of_its_call_index(kernel_device, rng):
    x = torch.randn(6, 40, generator=rng).to(kernel_device)
    layer = sjlt.SeededDropout(0.3, seed=2**64 - 1).to(kernel_device)  # the counter wraps mod 2**64
    for call in range(3):
        keep = reference.dropout_keep_mask(x.shape, 0.3, seed=call_seed(2**64 - 1, call)).to(kernel_device)
        assert torch.equal(layer(x) != 0, keep & (x != 0)), f"call {call}"
    assert layer.calls == 3


def test_seed_tensor_gives_the_int_seeds_mask(kernel_device, rng):
    x = torch.randn(5, 33, generator=rng).to(kernel_device)
    for seed in (0, 12345, 2**63 + 17, 2**64 - 1):
        bits = torch.tensor(seed - 2**64 if seed >= 2**63 else seed, dtype=torch.int64, device=kernel_device)
        assert torch.equal(F.seeded_dropout(x, 0.4, seed=bits), F.seeded_dropout(x, 0.4, seed=seed)), seed


def test_state_dict_round_trip_and_version_check():
    layer = sjlt.SeededDropout(0.2, seed=5)
    x = torch.randn(4, 8)
    layer(x), layer(x)
    state = io.BytesIO()
    torch.save(layer.state_dict(), state)
    state.seek(0)
    saved = torch.load(state)
    restored = sjlt.SeededDropout(0.2, seed=5)
    restored.load_state_dict(saved)
    assert restored.calls == 2 and torch.equal(restored(x), layer(x))
    saved["_extra_state"]["spec_version"] = 999
    with pytest.raises(RuntimeError, match="spec version 999"):
        sjlt.SeededDropout(0.2, seed=5).load_state_dict(saved)
    saved["_extra_state"]["spec_version"] = 2  # dropout's stream is the same since v1: accepted
    older = sjlt.SeededDropout(0.2, seed=5)
    older.load_state_dict(saved)
    assert older.calls == 2


def test_sparse_jl_state_of_an_older_spec_refuses_to_load_and_says_what_to_do():
    state = sjlt.SparseJL(64, 32, seed=1).state_dict()
    state["_extra_state"]["spec_version"] = 2  # v3 changed the windowed matrices
    with pytest.raises(RuntimeError, match="spec version 2.*Re-create the module"):
        sjlt.SparseJL(64, 32, seed=1).load_state_dict(state)


@pytest.mark.parametrize("version", [3, 4])
def test_sparse_jl_state_with_two_bands_from_before_v5_refuses_to_load(version):
    """v5 gave each band of 8 blocks its own rotation: a windowed matrix with nnz > 8 saved under
    v3 or v4 is not the current one, so its state refuses; nnz <= 8 ones load (the next test)."""
    state = sjlt.SparseJL(1024, 4096, seed=1).state_dict()
    assert state["_extra_state"]["nnz"] == 16
    state["_extra_state"]["spec_version"] = version
    with pytest.raises(RuntimeError, match=f"spec version {version}.*Re-create the module"):
        sjlt.SparseJL(1024, 4096, seed=1).load_state_dict(state)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_sparse_jl_state_off_the_lattice_from_before_v6_refuses_to_load(version):
    """v6 made every (k, nnz) with 16 nnz <= k windowed: k = 1000 at nnz 8 was classic before, so
    its saved state refuses; (100, 13), still classic, loads."""
    state = sjlt.SparseJL(64, 1000, seed=1, nnz=8).state_dict()
    state["_extra_state"]["spec_version"] = version
    with pytest.raises(RuntimeError, match=f"spec version {version}.*Re-create the module"):
        sjlt.SparseJL(64, 1000, seed=1, nnz=8).load_state_dict(state)
    state = sjlt.SparseJL(64, 100, seed=1, nnz=13).state_dict()
    state["_extra_state"]["spec_version"] = version
    sjlt.SparseJL(64, 100, seed=1, nnz=13).load_state_dict(state)


def test_sparse_jl_state_of_spec_v3_keeps_its_recorded_nnz():
    """v4 changed only the default nnz from k = 2048 on (8 -> 16): a v3 state names its nnz, so it
    loads and keeps the v3 matrix."""
    state = sjlt.SparseJL(1024, 4096, seed=1, nnz=8).state_dict()
    state["_extra_state"]["spec_version"] = 3
    module = sjlt.SparseJL(1024, 4096, seed=1)
    assert module.nnz == 16
    module.load_state_dict(state)
    assert module.nnz == 8
    x = torch.randn(3, 1024)
    assert torch.equal(module(x), sjlt.functional.sparse_jl(x, 4096, seed=1, nnz=8))


@pytest.mark.parametrize("k", [10000, 16384])
def test_sparse_jl_state_of_spec_v6_beyond_8192_keeps_its_recorded_nnz(k):
    """v7 changed only the default nnz beyond k = 8192 (16 -> 32): a v6 state names its nnz 16, so
    it loads and keeps the v6 matrix, off the lattice (10000) and on it (16384)."""
    state = sjlt.SparseJL(64, k, seed=1, nnz=16).state_dict()
    state["_extra_state"]["spec_version"] = 6
    module = sjlt.SparseJL(64, k, seed=1)
    assert module.nnz == 32
    module.load_state_dict(state)
    assert module.nnz == 16
    x = torch.randn(3, 64)
    assert torch.equal(module(x), sjlt.functional.sparse_jl(x, k, seed=1, nnz=16))
    assert not torch.allclose(module(x), sjlt.functional.sparse_jl(x, k, seed=1))  # the v7 default


def test_last_seed_is_the_seed_of_the_latest_call_and_none_before(rng):
    layer = sjlt.SeededDropout(0.5, seed=9)
    x = torch.randn(3, 16, generator=rng)
    assert torch.equal(layer(x) != 0, reference.dropout_keep_mask(x.shape, 0.5, seed=9) & (x != 0))
    assert layer.last_seed == 9 and sjlt.SeededDropout(0.5).last_seed is None


@pytest.mark.parametrize("op", ["forward", "transpose"])
@pytest.mark.parametrize("autocast_dtype", [torch.bfloat16, torch.float16])
def test_autocast_runs_in_the_autocast_dtype_like_linear(op, autocast_dtype, kernel_device, rng):
    x = torch.randn(9, 64, generator=rng).to(kernel_device).requires_grad_()
    fn = (lambda t: F.sparse_jl(t, 32, seed=4)) if op == "forward" else (lambda t: F.sparse_jl_transpose(t, 80, seed=4))
    with torch.autocast(kernel_device, dtype=autocast_dtype):
        got = fn(x)
        assert got.dtype == torch.nn.functional.linear(x, torch.ones(3, 64, device=kernel_device)).dtype
        assert fn(x.double()).dtype == torch.float64  # like F.linear, autocast leaves float64 alone
    assert got.dtype == autocast_dtype
    assert torch.equal(got, fn(x.detach().to(autocast_dtype)))
    got.float().sum().backward()
    assert x.grad.dtype == torch.float32
    assert fn(x).dtype == torch.float32  # outside autocast the input's dtype rules


def test_autocast_under_compile(kernel_device, rng):
    torch._dynamo.reset()
    x = torch.randn(9, 64, generator=rng).to(kernel_device)

    def fn(t):
        with torch.autocast(kernel_device, dtype=torch.bfloat16):
            return F.sparse_jl(t, 32, seed=4)

    compiled = torch.compile(fn, fullgraph=True, backend=COMPILE_BACKEND)
    got = compiled(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), fn(x).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("seed", [21, None], ids=["seeded", "drawn"])
def test_cuda_graph_replays_apply_a_fresh_mask_each(seed):
    layer = sjlt.SeededDropout(0.5, seed=seed).cuda()
    static_in = torch.randn(32, 256, device="cuda").abs() + 0.1  # no zeros: the output shows the mask
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up calls 0 and 1
            layer(static_in)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = layer(static_in)
    masks = []
    for replay in range(4):
        graph.replay()
        torch.cuda.synchronize()
        keep = static_out != 0
        want_seed = call_seed(seed, 2 + replay) if seed is not None else layer.last_seed
        want = reference.dropout_keep_mask(static_in.shape, 0.5, seed=want_seed).cuda()
        assert torch.equal(keep, want), f"replay {replay}"
        masks.append(keep)
    assert all(not torch.equal(masks[i], masks[j]) for i in range(4) for j in range(i))
    if seed is not None:
        assert layer.calls == 6


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA graphs need a GPU")
def test_cuda_graph_of_a_training_step_with_backward():
    torch.manual_seed(0)
    model = MLP(7).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: every replay sees the same weights
    static_x = torch.randn(8, 24, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            model(static_x).square().mean().backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = model(static_x).square().mean()
        static_loss.backward()
    losses = []
    for _ in range(3):
        graph.replay()
        losses.append(float(static_loss))
    twin = MLP(7).cuda()
    twin.load_state_dict(model.state_dict())
    twin.drop.load_state_dict({"_extra_state": {"p": 0.5, "seed": 7, "calls": 3, "spec_version": spec.SPEC_VERSION}})
    want = [float(twin(static_x).square().mean()) for _ in range(3)]
    assert losses == pytest.approx(want, rel=1e-5) and len(set(losses)) == 3


def test_caches_keep_nothing_while_a_cuda_graph_tree_warms_up(monkeypatch):
    """The one rule of sjlt's caches (``_buffers.may_keep``), on the state torch exposes: the CPU
    always keeps; a CUDA device keeps unless a graph is captured or this thread's CUDA-graph tree
    manager is in its warm-up (its allocations go to the graphs' pool); when torch's internals
    differ, nothing is kept. The GPU test below runs the real warm-up."""
    import sys
    import types

    from sjlt import _buffers

    assert _buffers.may_keep("cpu")
    cuda = torch.device("cuda", 0)
    manager = types.SimpleNamespace(in_warmup=False)
    trees = types.SimpleNamespace(get_manager=lambda index, create_if_none_exists: manager)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch._C, "_is_key_in_tls", lambda key: True, raising=False)
    monkeypatch.setitem(sys.modules, "torch._inductor.cudagraph_trees", trees)
    assert _buffers.may_keep(cuda)
    manager.in_warmup = True
    assert not _buffers.may_keep(cuda)
    manager = None  # no tree manager on this thread
    assert _buffers.may_keep(cuda)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert not _buffers.may_keep(cuda)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    del trees.get_manager  # another torch's internals
    assert not _buffers.may_keep(cuda)
    monkeypatch.delitem(sys.modules, "torch._inductor.cudagraph_trees")
    assert _buffers.may_keep(cuda)  # no trees imported: none can be warming up


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA graphs need a GPU")
def test_reduce_overhead_compile_as_the_very_first_call():
    """With sjlt's caches empty, the first dropout and projections (launch-bound: the dense
    algorithm) run inside the warm-up of CUDA-graph trees, which allocates from the graphs' pool:
    nothing made there may be cached (``_buffers.may_keep``), or a replay overwrites it."""
    from sjlt.ops import dense, dropout, windowed

    torch._dynamo.reset()
    dropout._SEEDS.clear()
    dropout._SCALES.clear()
    dense.clear_cache()
    dense._ZEROS.clear()
    windowed._TABLE_CACHE.clear()
    layer = sjlt.SeededDropout(0.5, seed=4).cuda()
    step = torch.compile(
        lambda t: F.sparse_jl(layer(t), 256, seed=3) + F.sparse_jl(t, 2048, seed=5)[:, :256],
        mode="reduce-overhead",
        fullgraph=True,
    )
    x = torch.randn(16, 512, device="cuda")
    for call in range(5):
        got = step(x).clone()
        dropped = x * reference.dropout_keep_mask(x.shape, 0.5, seed=call_seed(4, call)).cuda() * 2
        want = F.sparse_jl(dropped, 256, seed=3) + F.sparse_jl(x, 2048, seed=5)[:, :256]
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), f"call {call}"


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("seed", [33, None], ids=["seeded", "drawn"])
def test_reduce_overhead_compile_replays_a_fresh_mask_each_call(seed):
    """torch.compile(mode="reduce-overhead") runs the step as CUDA-graph replays (cudagraph trees):
    the module's device-side seed state still advances call by call. sjlt's caches are warmed by an
    eager call first (test_reduce_overhead_compile_as_the_very_first_call: the cold case)."""
    torch._dynamo.reset()
    F.seeded_dropout(torch.ones(4, device="cuda"), 0.5, seed=0)
    layer = sjlt.SeededDropout(0.5, seed=seed).cuda()
    step = torch.compile(lambda t: layer(t) * 1, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(16, 512, device="cuda").abs() + 0.1
    masks = []
    for call in range(6):
        keep = step(x) != 0
        want_seed = call_seed(seed, call) if seed is not None else layer.last_seed
        assert torch.equal(keep, reference.dropout_keep_mask(x.shape, 0.5, seed=want_seed).cuda()), f"call {call}"
        masks.append(keep.clone())
    assert all(not torch.equal(masks[i], masks[j]) for i in range(6) for j in range(i))
