"""The functional API, autograd, torch.library registration, torch.compile and the module."""

import io

import pytest
import torch

import sjlt
from sjlt import functional as F
from sjlt import reference

BACKENDS = ["torch", "triton"]


def _dense_matrix(d, k, seed, nnz=None, offset=0):
    return F.sparse_jl_matrix(
        d, k, seed=seed, nnz=nnz, column_offset=offset, backend="torch", dtype=torch.float64
    ).to_dense()


@pytest.mark.parametrize("backend", BACKENDS)
def test_leading_dimensions_and_dense_equivalence(backend, kernel_device, rng):
    x = torch.randn(2, 3, 5, 41, generator=rng, dtype=torch.float64)
    y = F.sparse_jl(x.float().to(kernel_device), 24, seed=9, backend=backend)
    assert y.shape == (2, 3, 5, 24)
    want = x @ _dense_matrix(41, 24, 9).T
    assert torch.allclose(y.double().cpu(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_shards_sum_to_the_whole(backend, kernel_device, rng):
    x = torch.randn(9, 300, generator=rng).to(kernel_device)
    whole = F.sparse_jl(x, 50, seed=4, backend=backend)
    parts = sum(
        F.sparse_jl(x[:, a:b], 50, seed=4, column_offset=a, backend=backend)
        for a, b in [(0, 17), (17, 200), (200, 300)]
    )
    assert torch.allclose(whole, parts, atol=1e-5)


def test_matrix_is_identical_from_every_backend(kernel_device):
    a = F.sparse_jl_matrix(333, 70, seed=2**63 + 11, nnz=5, column_offset=2**35, backend="torch")
    b = F.sparse_jl_matrix(333, 70, seed=2**63 + 11, nnz=5, column_offset=2**35, backend="triton", device=kernel_device)
    assert torch.equal(a.indices(), b.indices().cpu()) and torch.equal(a.values(), b.values().cpu())
    assert a.shape == (70, 333)
    # every column has nnz distinct rows, one in each block, with values +-1/sqrt(nnz)
    dense = a.to_dense()
    assert torch.equal((dense != 0).sum(0), torch.full((333,), 5))
    assert torch.allclose(dense.abs().sum(0), torch.full((333,), 5 / 5**0.5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_output_keeps_input_dtype(dtype, backend, kernel_device, rng):
    x = torch.randn(4, 30, generator=rng).to(dtype).to(kernel_device)
    if backend == "triton" and dtype == torch.float64:
        # float64 runs the reference on every device (backend="auto"); forcing the kernel is refused
        with pytest.raises(TypeError, match="backend='torch'"):
            F.sparse_jl(x, 8, seed=1, backend=backend)
        return
    assert F.sparse_jl(x, 8, seed=1, backend=backend).dtype == dtype
    assert F.sparse_jl_transpose(x[:, :8], 30, seed=1, backend=backend).dtype == dtype


def test_complex_inputs_project_real_and_imaginary_parts(rng):
    x = torch.randn(6, 20, generator=rng, dtype=torch.complex64)
    y = F.sparse_jl(x, 10, seed=3)
    assert y.dtype == torch.complex64
    assert torch.allclose(y.real, F.sparse_jl(x.real.contiguous(), 10, seed=3))
    assert torch.allclose(y.imag, F.sparse_jl(x.imag.contiguous(), 10, seed=3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_inputs_give_empty_outputs(backend, kernel_device):
    x = torch.empty(0, 12, device=kernel_device)
    assert F.sparse_jl(x, 5, seed=0, backend=backend).shape == (0, 5)
    assert F.sparse_jl(torch.empty(3, 0, device=kernel_device), 5, seed=0, backend=backend).tolist() == [[0.0] * 5] * 3
    assert F.sparse_jl_transpose(torch.empty(0, 5, device=kernel_device), 7, seed=0, backend=backend).shape == (0, 7)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda x: F.sparse_jl(x.int(), 4, seed=0), TypeError, "floating-point"),
        (lambda x: F.sparse_jl(x.bool(), 4, seed=0), TypeError, "floating-point"),
        (lambda x: F.sparse_jl(x.numpy(), 4, seed=0), TypeError, "torch.Tensor"),
        (lambda x: F.sparse_jl(x, 0, seed=0), ValueError, "out_features"),
        (lambda x: F.sparse_jl(x, 4, seed=0, nnz=0), ValueError, "nnz"),
        (lambda x: F.sparse_jl(x, 4, seed=0, nnz=5), ValueError, "nnz"),
        (lambda x: F.sparse_jl(x, 4, seed=-1), ValueError, "seed"),
        (lambda x: F.sparse_jl(x, 4, seed=2**64), ValueError, "seed"),
        (lambda x: F.sparse_jl(x, 4, seed=1.5), TypeError, "seed"),
        (lambda x: F.sparse_jl(x, 4, seed=0, column_offset=-1), ValueError, "column_offset"),
        (lambda x: F.sparse_jl(x, 4, seed=0, column_offset=2**62), ValueError, "column_offset"),
        (lambda x: F.sparse_jl(x, 4, seed=0, column_offset=True), TypeError, "column_offset"),
        (lambda x: F.sparse_jl(x, 4, seed=0, column_offset=3.0), TypeError, "column_offset"),
        (lambda x: F.sparse_jl(x, 4, seed=0, backend="cuda"), ValueError, "backend"),
        (lambda x: F.sparse_jl(x[0, 0], 4, seed=0), ValueError, "dimension"),
        (lambda x: F.sparse_jl_transpose(x, 0, seed=0), ValueError, "in_features"),
    ],
)
def test_bad_arguments_get_clear_errors(call, error, match, rng):
    with pytest.raises(error, match=match):
        call(torch.randn(3, 8, generator=rng))


def test_forcing_triton_on_cpu_without_interpreter_explains_the_fix(monkeypatch, rng, kernel_device):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        F.sparse_jl(torch.randn(2, 8, generator=rng), 4, seed=0, backend="triton")
    monkeypatch.undo()
    if kernel_device == "cpu":
        # The interpreter still runs the kernels afterwards: had the check above been the first import
        # of triton (conftest imports it before), triton's own functions would stay compiled.
        x = torch.randn(4, 64, generator=rng)
        want = F.sparse_jl(x, 16, seed=0, backend="torch")
        assert torch.allclose(F.sparse_jl(x, 16, seed=0, backend="triton"), want, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nonfinite_values_propagate_to_their_row_only(backend, kernel_device, rng):
    x = torch.randn(4, 64, generator=rng)
    x[1, 5] = float("nan")
    x[2, 7] = float("inf")
    y = F.sparse_jl(x.to(kernel_device), 16, seed=1, backend=backend).cpu()
    assert not torch.isfinite(y[1]).all() and not torch.isfinite(y[2]).all()
    assert torch.isfinite(y[[0, 3]]).all()


def test_gradcheck_float64():
    x = torch.randn(3, 13, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: F.sparse_jl(t, 6, seed=7, nnz=3), (x,))
    assert torch.autograd.gradgradcheck(lambda t: F.sparse_jl(t, 6, seed=7, nnz=3), (x,))
    y = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: F.sparse_jl_transpose(t, 13, seed=7, nnz=3, column_offset=5), (y,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_is_the_transpose_and_saves_nothing(backend, kernel_device, rng):
    from sjlt.ops import dense

    x = torch.randn(5, 40, generator=rng, device="cpu").to(kernel_device).requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = F.sparse_jl(x, 12, seed=8, backend=backend)
    # The dense algorithm of small GPU inputs saves its cached sign matrix, which costs no memory.
    cached = [m.data_ptr() for m in dense._CACHE.values()]
    assert [t for t in saved if t.data_ptr() not in cached] == []
    g = torch.randn(5, 12, generator=rng).to(kernel_device)
    y.backward(g)
    want = g.double().cpu() @ _dense_matrix(40, 12, 8)
    assert torch.allclose(x.grad.double().cpu(), want, atol=1e-5)


def test_opcheck_passes_for_both_ops(rng):
    x = torch.randn(4, 19, generator=rng, requires_grad=True)
    y = torch.randn(4, 7, generator=rng, requires_grad=True)
    torch.library.opcheck(torch.ops.sjlt.sparse_jl.default, (x, 7, 123, 4, 3, 2, "auto"))
    torch.library.opcheck(torch.ops.sjlt.sparse_jl_transpose.default, (y, 19, 123, 4, 3, 2, "auto"))


def test_torch_compile_fullgraph(rng):
    # aot_eager traces the whole graph through dynamo and AOT autograd without needing a C++
    # toolchain for inductor on CPU; tests/test_gpu_only.py compiles with inductor on the GPU.
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), sjlt.SparseJL(64, 16, seed=3), torch.nn.ReLU())
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(8, 32, generator=rng)
    assert torch.allclose(compiled(x), model(x))
    compiled(x).sum().backward()


def test_module_state_dict_and_repr_reproduce_the_projection(rng):
    module = sjlt.SparseJL(50, 20, seed=2**60 + 1, nnz=5)
    assert "seed=1152921504606846977" in repr(module) and "nnz=5" in repr(module)
    assert list(module.parameters()) == []
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    buffer.seek(0)
    loaded = sjlt.SparseJL(50, 20, seed=0)
    loaded.load_state_dict(torch.load(buffer))
    x = torch.randn(3, 50, generator=rng)
    assert torch.equal(loaded(x), module(x))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        sjlt.SparseJL(51, 20, seed=0).load_state_dict(module.state_dict())
    with pytest.raises(ValueError, match="in_features=50"):
        module(torch.randn(3, 49))


def test_reference_forward_matches_the_dense_float64_matrix(rng):
    """The reference against S materialised densely in float64, with nnz below the default."""
    x = torch.randn(6, 33, generator=rng, dtype=torch.float64)
    y = reference.sparse_jl_forward(x, 11, seed=5, nnz=2)
    assert torch.allclose(y, x @ _dense_matrix(33, 11, 5, nnz=2).T)


def _ragged_blocks(rng, n, widths, device, dtype=torch.float32):
    blocks, first = [], 0
    for width in widths:
        blocks.append((first, torch.randn(n, width, generator=rng).to(dtype).to(device)))
        first += width
    return blocks


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [24, 300])  # classic layout (per block), windowed (grouped on a GPU)
def test_sparse_jl_blocks_is_the_projection_of_the_concatenation(backend, k, kernel_device, rng):
    blocks = _ragged_blocks(rng, 5, [17, 1, 256, 90], kernel_device)
    blocks.append((400, torch.randn(5, 30, generator=rng).to(kernel_device)))  # after a gap of 36 columns
    full = torch.zeros(5, 430, dtype=torch.float64)
    for first, x in blocks:
        full[:, first : first + x.shape[1]] = x.double().cpu()
    got = F.sparse_jl_blocks(blocks, k, seed=7, column_offset=2**33 + 3, backend=backend)
    assert got.dtype == torch.float32 and got.shape == (5, k)
    want = full @ _dense_matrix(430, k, 7, offset=2**33 + 3).T
    assert torch.allclose(got.double().cpu(), want, atol=1e-5, rtol=1e-5)


def test_sparse_jl_blocks_groups_one_launch_per_dtype_and_run(monkeypatch, kernel_device, rng):
    """On the kernel path the windowed blocks of each dtype share a launch, cut where a gap would
    make the table span too many columns; a lone block takes sparse_jl."""
    from sjlt.ops import layouts

    launches = []
    grouped = layouts.triton_forward_blocks
    monkeypatch.setattr(
        layouts, "triton_forward_blocks", lambda blocks, *a: launches.append(len(blocks)) or grouped(blocks, *a)
    )
    blocks = _ragged_blocks(rng, 3, [40, 7, 100], kernel_device)
    blocks += [(first + 200, x.to(torch.bfloat16)) for first, x in _ragged_blocks(rng, 3, [33, 64], kernel_device)]
    far = F._GROUPED_GAP_COLUMNS + 400
    blocks += [(far, torch.randn(3, 20, generator=rng).to(kernel_device))]
    got = F.sparse_jl_blocks(blocks, 256, seed=1, backend="triton")
    assert sorted(launches) == [2, 3]  # float32 [0, 147), bfloat16 [200, 297); the far block alone
    want = sum(F.sparse_jl(x.float(), 256, seed=1, column_offset=first, backend="torch") for first, x in blocks)
    assert torch.allclose(got.cpu(), want.cpu(), atol=1e-5, rtol=1e-5)


def test_sparse_jl_blocks_of_any_rank_and_order(monkeypatch, kernel_device, rng):
    """A block (n, ...) holds the columns of its reshape (n, -1). Contiguous ones of any rank and
    row-strided 2-D ones join the grouped launch, read in place; others take sparse_jl on the
    reshape. Blocks may come in any column order."""
    from sjlt.ops import layouts

    launches = []
    grouped = layouts.triton_forward_blocks
    monkeypatch.setattr(
        layouts, "triton_forward_blocks", lambda blocks, *a: launches.append(len(blocks)) or grouped(blocks, *a)
    )
    wide = torch.randn(4, 50, generator=rng).to(kernel_device)
    blocks = [
        (41, torch.randn(4, 7, 3, generator=rng).to(kernel_device).transpose(1, 2)),  # not contiguous: alone
        (0, torch.randn(4, 3, 7, generator=rng).to(kernel_device)),
        (62, torch.randn(4, 2, 2, 5, generator=rng).to(kernel_device)),
        (21, wide[:, 5:25]),  # rows 50 elements apart
    ]
    full = torch.zeros(4, 82, dtype=torch.float64)
    for first, x in blocks:
        flat = x.reshape(4, -1)
        full[:, first : first + flat.shape[1]] = flat.double().cpu()
    got = F.sparse_jl_blocks(blocks, 256, seed=3, backend="triton")
    assert launches == [3]
    want = full @ _dense_matrix(82, 256, 3).T
    assert torch.allclose(got.double().cpu(), want, atol=1e-5, rtol=1e-5)


def test_sparse_jl_blocks_reads_blocks_of_contiguous_tails_in_place(monkeypatch, kernel_device, rng):
    """A block whose last dimension is contiguous joins the grouped launch as one span per index of
    the dimensions before its contiguous tail: vmap's per-example gradient of an embedding is
    (batch, rows, width) with the batch between the rows. A strided last dimension takes sparse_jl."""
    from sjlt.ops import layouts

    launches = []
    grouped = layouts.triton_forward_blocks
    monkeypatch.setattr(
        layouts, "triton_forward_blocks", lambda blocks, *a: launches.append(len(blocks)) or grouped(blocks, *a)
    )
    embedding = torch.randn(6, 4, 5, generator=rng).to(kernel_device).permute(1, 0, 2)  # (4, 6, 5), batch inside
    sliced = torch.randn(4, 3, 2, 10, generator=rng).to(kernel_device)[..., 1:9]  # tails of 8, rows 60 apart
    blocks = [
        (0, embedding),
        (30, sliced),
        (78, torch.randn(4, 9, generator=rng).to(kernel_device)),
        (87, torch.randn(4, 5, 2, generator=rng).to(kernel_device).transpose(1, 2)),  # strided last dimension
    ]
    full = torch.cat([x.reshape(4, -1) for _, x in blocks], 1).double().cpu()
    got = F.sparse_jl_blocks(blocks, 256, seed=5, column_offset=2**33 + 1, backend="triton")
    assert launches == [3]
    want = full @ _dense_matrix(97, 256, 5, offset=2**33 + 1).T
    assert torch.allclose(got.double().cpu(), want, atol=1e-5, rtol=1e-5)


def _tensors_in(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [tensor for item in value for tensor in _tensors_in(item)]
    return (
        [tensor for item in vars(value).values() for tensor in _tensors_in(item)] if hasattr(value, "__dict__") else []
    )


def test_sparse_jl_blocks_plans_each_signature_once(monkeypatch, kernel_device, rng):
    """A grouped call repeated with blocks of the same shapes, strides and dtypes at other addresses
    (TRAK's gradients, every step) reuses its checks and plan, and gives the projection of the new
    blocks; another stride, dtype or grad mode plans again; a call that fails plans nothing. A plan
    holds no tensor."""
    monkeypatch.setattr(F, "_BLOCK_PLANS", {})
    planned = []
    plan_blocks = F._plan_blocks
    monkeypatch.setattr(F, "_plan_blocks", lambda *a: planned.append(1) or plan_blocks(*a))

    def call(blocks):
        got = F.sparse_jl_blocks(blocks, 256, seed=4, backend="triton")
        want = sum(
            F.sparse_jl(x.reshape(3, -1).float(), 256, seed=4, column_offset=f, backend="torch") for f, x in blocks
        )
        assert torch.allclose(got.cpu(), want.cpu(), atol=1e-5, rtol=1e-5)

    for _ in range(3):
        call(_ragged_blocks(rng, 3, [40, 7, 100], kernel_device))
    assert len(planned) == 1
    strided = _ragged_blocks(rng, 3, [40, 7], kernel_device) + [(47, torch.randn(3, 120).to(kernel_device)[:, :100])]
    call(strided)
    call([(f, x.to(torch.bfloat16)) for f, x in strided])
    with torch.no_grad():
        call(strided)
    assert len(planned) == 4
    with pytest.raises(ValueError, match="same rows"):
        F.sparse_jl_blocks(strided + [(147, torch.zeros(2, 4, device=kernel_device))], 256, seed=4)
    assert len(planned) == 5 and len(F._BLOCK_PLANS) == 4
    assert not _tensors_in(list(F._BLOCK_PLANS.values()))


def test_sparse_jl_blocks_is_differentiable_in_its_grouped_launch(monkeypatch, kernel_device, rng):
    """Blocks that need a gradient join the grouped launch (TRAK's per-example gradients need one:
    it differentiates with respect to parameters that require gradients); each gets
    sparse_jl_transpose of the result's gradient at its columns, in its own shape and dtype. A block
    projected alone is differentiable too."""
    from sjlt.ops import layouts

    launches = []
    grouped = layouts.triton_forward_blocks
    monkeypatch.setattr(
        layouts, "triton_forward_blocks", lambda blocks, *a: launches.append(len(blocks)) or grouped(blocks, *a)
    )
    plain = _ragged_blocks(rng, 4, [30], kernel_device)[0]
    flat = torch.randn(4, 50, generator=rng).to(kernel_device).requires_grad_()
    embedding = torch.randn(6, 4, 5, generator=rng).to(kernel_device).requires_grad_()  # batch inside, as vmap's
    half = torch.randn(4, 3, 8, generator=rng).to(kernel_device).to(torch.bfloat16).requires_grad_()
    strided = torch.randn(4, 5, 2, generator=rng).to(kernel_device).requires_grad_()  # last dimension strided: alone
    blocks = [plain, (30, flat), (80, embedding.permute(1, 0, 2)), (110, half), (200, strided.transpose(1, 2))]
    out = F.sparse_jl_blocks(blocks, 64, seed=2, column_offset=2**33 + 7, backend="triton")
    assert sorted(launches) == [3]  # float32: plain, flat, embedding; bfloat16 and the strided block alone
    weights = torch.randn(4, 64, generator=rng).to(kernel_device)
    (out * weights).sum().backward()
    views = {
        30: (flat, lambda g: g),
        80: (embedding, lambda g: g.permute(1, 0, 2)),
        200: (strided, lambda g: g.transpose(1, 2)),
    }
    for first, (leaf, as_block) in views.items():
        got = as_block(leaf.grad).reshape(4, -1)
        want = F.sparse_jl_transpose(weights, got.shape[1], seed=2, column_offset=2**33 + 7 + first, backend="torch")
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-5, atol=1e-5)
    want = F.sparse_jl_transpose(weights, 24, seed=2, column_offset=2**33 + 7 + 110, backend="torch")
    assert half.grad.dtype == torch.bfloat16
    torch.testing.assert_close(half.grad.reshape(4, -1).float().cpu(), want.cpu(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "blocks,error,match",
    [
        ([], ValueError, "empty"),
        (torch.zeros(3, 4), TypeError, "sequence"),
        ([torch.zeros(3, 4)], TypeError, "pair"),
        ([(0, torch.zeros(3, 4, dtype=torch.int32))], TypeError, "floating-point"),
        ([(0, torch.zeros(3))], ValueError, "at least 2 dimensions"),
        ([(-1, torch.zeros(3, 4))], ValueError, "column_offset"),
        ([(0, torch.zeros(3, 4)), (4, torch.zeros(2, 4))], ValueError, "same rows"),
    ],
)
def test_sparse_jl_blocks_bad_arguments(blocks, error, match):
    with pytest.raises(error, match=match):
        F.sparse_jl_blocks(blocks, 8, seed=0)
