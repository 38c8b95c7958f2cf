"""Philox4x32-10: the reference and the Triton core against Random123's known answers and each other."""

import math

import pytest
import torch

from sjlt import reference

# Random123 known-answer vectors: (c0, c1, c2, c3, k0, k1) -> (r0, r1, r2, r3). shared/BRIEF.md section 3.
KNOWN_ANSWERS = [
    (
        (0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000),
        (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
    ),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def _kernel_philox(counters: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    from sjlt.kernels.philox import philox_blocks_kernel

    n = counters.shape[0]
    out = torch.full((n, 4), -1, dtype=torch.int64, device=counters.device)
    block = 128
    philox_blocks_kernel[(math.ceil(n / block),)](counters, keys, out, n, BLOCK=block)
    return out


@pytest.mark.parametrize("inputs,expected", KNOWN_ANSWERS)
def test_reference_known_answers(inputs, expected):
    words = reference.philox4x32_10(*(torch.tensor([v], dtype=torch.int64) for v in inputs))
    assert [int(w) for w in words] == list(expected)


@pytest.mark.parametrize("inputs,expected", KNOWN_ANSWERS)
def test_reference_known_answers_with_int_keys(inputs, expected):
    counters = [torch.tensor([v], dtype=torch.int64) for v in inputs[:4]]
    words = reference.philox4x32_10(*counters, inputs[4], inputs[5])
    assert [int(w) for w in words] == list(expected)


def test_kernel_known_answers(kernel_device):
    counters = torch.tensor([a[:4] for a, _ in KNOWN_ANSWERS], dtype=torch.int64, device=kernel_device)
    keys = torch.tensor([a[4:] for a, _ in KNOWN_ANSWERS], dtype=torch.int64, device=kernel_device)
    expected = torch.tensor([e for _, e in KNOWN_ANSWERS], dtype=torch.int64)
    assert torch.equal(_kernel_philox(counters, keys).cpu(), expected)


def test_kernel_matches_reference_on_random_counters(kernel_device, rng):
    n = 3000
    counters = torch.randint(0, 2**32, (n, 4), generator=rng, dtype=torch.int64)
    keys = torch.randint(0, 2**32, (n, 2), generator=rng, dtype=torch.int64)
    got = _kernel_philox(counters.to(kernel_device), keys.to(kernel_device)).cpu()
    want = torch.stack(reference.philox4x32_10(*counters.unbind(1), *keys.unbind(1)), dim=1)
    assert torch.equal(got, want)


def test_core_matches_triton_builtin_philox(kernel_device, rng):
    """Our core equals tl.philox(seed, c0..c3) with seed = k0 + 2**32 k1, on the same counters."""
    import triton
    import triton.language as tl

    @triton.jit
    def builtin_philox_kernel(counter_ptr, out_ptr, seed, n, BLOCK: tl.constexpr):
        idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = idx < n
        c0 = tl.load(counter_ptr + idx * 4 + 0, mask=mask, other=0).to(tl.uint32)
        c1 = tl.load(counter_ptr + idx * 4 + 1, mask=mask, other=0).to(tl.uint32)
        c2 = tl.load(counter_ptr + idx * 4 + 2, mask=mask, other=0).to(tl.uint32)
        c3 = tl.load(counter_ptr + idx * 4 + 3, mask=mask, other=0).to(tl.uint32)
        r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, c3)
        tl.store(out_ptr + idx * 4 + 0, r0.to(tl.int64), mask=mask)
        tl.store(out_ptr + idx * 4 + 1, r1.to(tl.int64), mask=mask)
        tl.store(out_ptr + idx * 4 + 2, r2.to(tl.int64), mask=mask)
        tl.store(out_ptr + idx * 4 + 3, r3.to(tl.int64), mask=mask)

    n = 500
    seed = int(torch.randint(2**32, 2**62, (), generator=rng))
    counters = torch.randint(0, 2**32, (n, 4), generator=rng, dtype=torch.int64).to(kernel_device)
    builtin = torch.full((n, 4), -1, dtype=torch.int64, device=kernel_device)
    builtin_philox_kernel[(math.ceil(n / 128),)](counters, builtin, seed, n, BLOCK=128)
    keys = torch.tensor([[seed & 0xFFFFFFFF, seed >> 32]] * n, dtype=torch.int64, device=kernel_device)
    assert torch.equal(_kernel_philox(counters, keys).cpu(), builtin.cpu())


def test_reference_broadcasts_and_stays_on_device(rng):
    c = torch.randint(0, 2**32, (7, 1), generator=rng, dtype=torch.int64)
    t = torch.arange(5, dtype=torch.int64)[None, :]
    words = reference.philox4x32_10(c, c, t, 0, 123, 456)
    assert all(w.shape == (7, 5) and w.dtype == torch.int64 for w in words)
    assert all(int(w.min()) >= 0 and int(w.max()) < 2**32 for w in words)
    single = reference.philox4x32_10(c[3], c[3], t[:, 2], torch.zeros(1, dtype=torch.int64), 123, 456)
    assert int(single[1]) == int(words[1][3, 2])


def test_reference_rejects_non_int64_tensors():
    with pytest.raises(TypeError, match="int64"):
        reference.philox4x32_10(torch.zeros(3, dtype=torch.int32), 0, 0, 0, 0, 0)
