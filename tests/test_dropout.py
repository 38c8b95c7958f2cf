"""Seeded dropout: identical masks from kernel and reference, nothing saved, statistics, edge cases."""

import io
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch.utils.checkpoint import checkpoint

import sjlt
from sjlt import functional as F
from sjlt import reference, spec

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _both(x, p, seed, kernel_device):
    got = F.seeded_dropout(
        x.to(kernel_device),
        p,
        seed=seed.to(kernel_device) if isinstance(seed, torch.Tensor) else seed,
        backend="triton",
    ).cpu()
    want = F.seeded_dropout(x, p, seed=seed, backend="torch")
    return got, want


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (3,), (4097,), (5, 7, 33), (2, 1, 1030)])
def test_kernel_equals_reference_bit_for_bit(kernel_device, rng, dtype, shape):
    x = (torch.randn(shape, generator=rng) * 10).to(dtype)
    seed = int(torch.randint(0, 2**62, (), generator=rng)) * 3
    got, want = _both(x, 0.3, seed, kernel_device)
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.t(),  # transposed 2-D
        lambda t: t[::2, 1::3],  # 2-D slices
        lambda t: t.reshape(2, 15, 40)[:, :, :37],  # leading dims collapse into one
        lambda t: t.reshape(12, 10, 10).permute(2, 0, 1),  # cannot collapse: copied first
    ],
)
def test_strided_inputs_match_reference(kernel_device, rng, make):
    x = make(torch.randn(30, 40, generator=rng))
    assert not x.is_contiguous()
    got, want = _both(x, 0.5, 17, kernel_device)
    assert torch.equal(got, want) and got.shape == x.shape


def test_mask_depends_on_logical_index_not_layout(rng):
    x = torch.randn(30, 40, generator=rng)
    assert torch.equal(F.seeded_dropout(x.t().contiguous().t(), 0.4, seed=5), F.seeded_dropout(x, 0.4, seed=5))


def test_per_row_seeds(kernel_device, rng):
    x = torch.randn(9, 50, generator=rng)
    seeds = torch.tensor([0, 1, -1, 2**62, 5, 5, 7, 8, 9])  # int64 bits read as uint64: -1 is 2**64 - 1
    got, want = _both(x, 0.25, seeds, kernel_device)
    assert torch.equal(got, want)
    assert torch.equal(got[4] != 0, got[5] != 0)  # same seed, same row stream, same mask
    single = F.seeded_dropout(x[2:3], 0.25, seed=2**64 - 1)
    assert torch.equal(got[2:3], single)  # a row's stream is the int-seed stream of that seed


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_trivial_probabilities_and_eval(backend, kernel_device, rng):
    x = torch.randn(4, 5, generator=rng).to(kernel_device)
    assert F.seeded_dropout(x, 0.0, seed=1, backend=backend) is x
    assert F.seeded_dropout(x, 0.7, seed=1, training=False, backend=backend) is x
    assert torch.equal(F.seeded_dropout(x, 1.0, seed=1, backend=backend), torch.zeros_like(x))
    empty = torch.empty(0, 3, device=kernel_device)
    assert F.seeded_dropout(empty, 0.5, seed=1, backend=backend).shape == (0, 3)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda x: F.seeded_dropout(x, -0.1, seed=0), ValueError, r"\[0, 1\]"),
        (lambda x: F.seeded_dropout(x, 1.5, seed=0), ValueError, r"\[0, 1\]"),
        (lambda x: F.seeded_dropout(x, float("nan"), seed=0), ValueError, r"\[0, 1\]"),
        (lambda x: F.seeded_dropout(x, "0.5", seed=0), TypeError, "p must be"),
        (lambda x: F.seeded_dropout(x.long(), 0.5, seed=0), TypeError, "floating-point"),
        (lambda x: F.seeded_dropout(x, 0.5, seed=-3), ValueError, "seed"),
        (lambda x: F.seeded_dropout(x, 0.5, seed=torch.zeros(3, dtype=torch.int64)), ValueError, "one seed per row"),
        (lambda x: F.seeded_dropout(x, 0.5, seed=torch.zeros(4)), TypeError, "int64"),
        (lambda x: F.seeded_dropout(x, 0.5, seed=torch.zeros(4, 1, dtype=torch.int64)), TypeError, "0-d"),
    ],
)
def test_bad_arguments_get_clear_errors(call, error, match, rng):
    with pytest.raises(error, match=match):
        call(torch.randn(4, 6, generator=rng))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_nothing_of_x_size_is_saved_and_backward_regenerates_the_mask(backend, kernel_device, rng):
    x = torch.randn(64, 33, generator=rng).to(kernel_device).requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = F.seeded_dropout(x, 0.4, seed=123, backend=backend)
    assert all(t is None or t.numel() < x.numel() for t in saved)
    y.sum().backward()
    keep = reference.dropout_keep_mask(x.shape, 0.4, seed=123).to(kernel_device)
    assert torch.equal(x.grad, keep.float() / 0.6)


def test_gradcheck_float64():
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: F.seeded_dropout(t, 0.3, seed=9), (x,))


def test_checkpoint_recomputation_reproduces_the_mask(rng):
    layer = sjlt.SeededDropout(0.5)
    x = torch.randn(16, 20, generator=rng, requires_grad=True)
    torch.manual_seed(0)
    out = checkpoint(lambda t: layer(t) * 2, x, use_reentrant=False)
    out.sum().backward()
    keep = reference.dropout_keep_mask(x.shape, 0.5, seed=layer.last_seed)
    assert torch.equal(x.grad, keep.float() * 4)


def test_opcheck_and_compile(rng):
    x = torch.randn(8, 12, generator=rng, requires_grad=True)
    one_seed = torch.tensor(7 | (3 << 32), dtype=torch.int64)
    torch.library.opcheck(torch.ops.sjlt.seeded_dropout.default, (x, 0.25, one_seed, "auto"))
    torch.library.opcheck(torch.ops.sjlt.seeded_dropout.default, (x, 0.25, torch.arange(8, dtype=torch.int64), "auto"))
    fn = torch.compile(lambda t: F.seeded_dropout(t, 0.25, seed=11) * 3, fullgraph=True)
    assert torch.equal(fn(x), F.seeded_dropout(x, 0.25, seed=11) * 3)


def test_module_seed_semantics(rng):
    x = torch.randn(10, 10, generator=rng)
    torch.manual_seed(5)
    a = [sjlt.SeededDropout(0.5)(x) for _ in range(2)]
    torch.manual_seed(5)
    b = [sjlt.SeededDropout(0.5)(x) for _ in range(2)]
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[0], a[1])

    seeded = sjlt.SeededDropout(0.5, seed=3)
    first, second = seeded(x), seeded(x)
    assert not torch.equal(first, second) and seeded.calls == 2
    state = io.BytesIO()
    torch.save(seeded.state_dict(), state)
    state.seek(0)
    restored = sjlt.SeededDropout(0.5, seed=3)
    restored.load_state_dict(torch.load(state))
    assert torch.equal(restored(x), seeded(x))  # the call counter travelled with the state
    seeded.eval()
    assert seeded(x) is x


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 1 / 3])
def test_keep_rate_lies_in_a_binomial_interval(p):
    n = 400_000
    keep = reference.dropout_keep_mask((n,), p, seed=2024)
    kept = int(keep.sum())
    assert stats.binomtest(kept, n, 1 - p).pvalue > 1e-4


def test_no_correlation_between_neighbours_rows_or_seeds():
    rows, cols = 400, 1000
    mask = reference.dropout_keep_mask((rows, cols), 0.5, seed=77).double()
    bound = 5 / math.sqrt(rows * cols)
    centred = mask - 0.5
    assert abs(float((centred[:, 1:] * centred[:, :-1]).mean() * 4)) < bound  # neighbouring elements
    assert abs(float((centred[1:] * centred[:-1]).mean() * 4)) < bound  # neighbouring rows
    nxt = reference.dropout_keep_mask((rows, cols), 0.5, seed=78).double() - 0.5
    assert abs(float((centred * nxt).mean() * 4)) < bound  # consecutive seeds
    per_lane = [float(mask.reshape(-1, 4)[:, lane].mean()) for lane in range(4)]
    assert np.ptp(per_lane) < 0.01  # the four words of one Philox call behave alike


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="2**31 elements need a GPU (the interpreter would take hours)"
)
def test_more_than_2_31_elements_on_gpu():
    n = 2**31 + 4099
    x = torch.ones(n, dtype=torch.float16, device="cuda")
    y = F.seeded_dropout(x, 0.5, seed=3)
    tail = torch.arange(n - 5000, n, device="cuda")
    group = tail >> 2
    words = torch.stack(
        reference.philox4x32_10(group & 0xFFFFFFFF, group >> 32, torch.zeros_like(group), spec.DOMAIN_DROPOUT, 3, 0)
    )
    want = words.gather(0, (tail & 3)[None]).squeeze(0) >= spec.dropout_threshold(0.5)
    assert torch.equal(y[tail] != 0, want)
