"""Philox4x32-10 (Salmon et al., SC'11; Random123), the only random number core in sjlt's Triton code.

Every kernel that needs randomness calls :func:`philox4x32_10` with a counter it owns (see the
stream layout in ``docs/spec.md``); nothing calls ``tl.rand``/``tl.randint``, whose counter
layout Triton may change between versions.
"""

import triton
import triton.language as tl

# Round multipliers and Weyl key increments of Philox4x32 (Random123).
PHILOX_M0 = tl.constexpr(0xD2511F53)
PHILOX_M1 = tl.constexpr(0xCD9E8D57)
PHILOX_W0 = tl.constexpr(0x9E3779B9)
PHILOX_W1 = tl.constexpr(0xBB67AE85)


@triton.jit
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32 with 10 rounds on uint32 tensors (or scalars); returns the 4 output words.

    counter = (c0, c1, c2, c3), key = (k0, k1). Bit-identical to Random123's philox4x32_R(10, ...)
    and to ``tl.philox(seed, c0, c1, c2, c3)`` with seed = k0 + 2**32 * k1.
    """
    # Same-width casts keep the bits; int64 arguments are truncated to their low word. Keys are
    # added to a zero tensor first: the compiler turns an integer argument equal to 1 into a
    # Python constant, which has no .to().
    c0 = c0.to(tl.uint32)
    c1 = c1.to(tl.uint32)
    c2 = c2.to(tl.uint32)
    c3 = c3.to(tl.uint32)
    k0 = (tl.zeros_like(c0) + k0).to(tl.uint32)
    k1 = (tl.zeros_like(c0) + k1).to(tl.uint32)
    for _ in tl.static_range(10):
        prev_c0 = c0
        prev_c2 = c2
        c0 = tl.umulhi(PHILOX_M1, prev_c2) ^ c1 ^ k0
        c2 = tl.umulhi(PHILOX_M0, prev_c0) ^ c3 ^ k1
        c1 = prev_c2 * PHILOX_M1
        c3 = prev_c0 * PHILOX_M0
        # Bumping the key after the last round too is harmless: it is not used again.
        k0 = k0 + PHILOX_W0
        k1 = k1 + PHILOX_W1
    return c0, c1, c2, c3


@triton.jit
def philox_blocks_kernel(counter_ptr, key_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Evaluates the core on n counters (n x 4 uint32 as int64) under n keys (n x 2); for tests."""
    pid = tl.program_id(0)
    idx = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    c0 = tl.load(counter_ptr + idx * 4 + 0, mask=mask, other=0).to(tl.uint32)
    c1 = tl.load(counter_ptr + idx * 4 + 1, mask=mask, other=0).to(tl.uint32)
    c2 = tl.load(counter_ptr + idx * 4 + 2, mask=mask, other=0).to(tl.uint32)
    c3 = tl.load(counter_ptr + idx * 4 + 3, mask=mask, other=0).to(tl.uint32)
    k0 = tl.load(key_ptr + idx * 2 + 0, mask=mask, other=0).to(tl.uint32)
    k1 = tl.load(key_ptr + idx * 2 + 1, mask=mask, other=0).to(tl.uint32)
    r0, r1, r2, r3 = philox4x32_10(c0, c1, c2, c3, k0, k1)
    tl.store(out_ptr + idx * 4 + 0, r0.to(tl.int64), mask=mask)
    tl.store(out_ptr + idx * 4 + 1, r1.to(tl.int64), mask=mask)
    tl.store(out_ptr + idx * 4 + 2, r2.to(tl.int64), mask=mask)
    tl.store(out_ptr + idx * 4 + 3, r3.to(tl.int64), mask=mask)
