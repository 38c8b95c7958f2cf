"""The stream spec: seed range, version, and the separation of SJLT and dropout counters."""

import numpy as np
import pytest
import torch

import sjlt
from sjlt import reference, spec


def test_spec_version_is_exposed():
    assert sjlt.SPEC_VERSION == spec.SPEC_VERSION == 7


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1, np.uint64(7), np.int64(3)])
def test_valid_seeds_split_into_key_words(seed):
    k0, k1 = spec.philox_key(seed)
    assert k0 + (k1 << 32) == int(seed)
    assert 0 <= k0 < 2**32 and 0 <= k1 < 2**32


@pytest.mark.parametrize(
    "seed,error",
    [
        (-1, ValueError),
        (2**64, ValueError),
        (1.0, TypeError),
        ("3", TypeError),
        (True, TypeError),
        (None, TypeError),
        (torch.tensor(3), TypeError),
    ],
)
def test_invalid_seeds_are_refused_with_a_clear_error(seed, error):
    with pytest.raises(error, match="seed"):
        spec.check_seed(seed)


def test_sparse_jl_and_dropout_use_disjoint_counter_domains():
    assert spec.DOMAIN_SPARSE_JL != spec.DOMAIN_DROPOUT


def test_streams_stay_independent_under_the_same_seed():
    """Word 0 of counter (g, 0, 0, domain) differs between the four domains (classic SJLT, dropout,
    windowed chunk words, window rotations) and is uncorrelated across them."""
    seed, k = 42, 15  # k < 16: the classic layout applies
    rows, _ = reference.sparse_jl_hash(4096, k, seed=seed, nnz=1)
    g = torch.arange(4096, dtype=torch.int64)
    words = {
        domain: reference.philox4x32_10(g, torch.zeros_like(g), torch.zeros_like(g), domain, seed, 0)[0]
        for domain in (
            spec.DOMAIN_SPARSE_JL,
            spec.DOMAIN_DROPOUT,
            spec.DOMAIN_SPARSE_JL_WINDOW,
            spec.DOMAIN_SPARSE_JL_GROUP,
        )
    }
    assert torch.equal(rows[0], (words[spec.DOMAIN_SPARSE_JL] * k) >> 32)  # the documented formula
    assert torch.equal(reference.chunk_words(g, 1, seed)[0], words[spec.DOMAIN_SPARSE_JL_WINDOW])
    rotations = reference.window_rotations(g, 7, seed, 1)[:, 0]
    assert torch.equal(rotations, (words[spec.DOMAIN_SPARSE_JL_GROUP] * 7) >> 32)
    values = list(words.values())
    for i in range(len(values)):
        for j in range(i):
            assert (values[i] == values[j]).float().mean() < 0.01
            assert abs(np.corrcoef(values[i].double().numpy(), values[j].double().numpy())[0, 1]) < 0.1


@pytest.mark.parametrize("p,threshold", [(0.0, 0), (1.0, 2**32), (0.5, 2**31), (0.25, 2**30), (1e-12, 0)])
def test_dropout_threshold_is_exact(p, threshold):
    assert spec.dropout_threshold(p) == threshold


@pytest.mark.parametrize(
    "nnz,k,error",
    [(0, 4, ValueError), (5, 4, ValueError), (1.5, 4, TypeError), (2, 0, ValueError), (2, 2.0, TypeError)],
)
def test_resolve_nnz_rejects_bad_values(nnz, k, error):
    with pytest.raises(error):
        spec.resolve_nnz(nnz, k)


def test_default_nnz_is_capped_by_out_features():
    assert spec.resolve_nnz(None, 3) == 3
    assert spec.resolve_nnz(None, 1000) == spec.DEFAULT_NNZ


@pytest.mark.parametrize(
    "k,nnz,lattice",
    [
        (16, 1, True),
        (17, 1, False),  # one block, A = 2
        (48, 3, True),
        (64, 4, True),
        (100, 6, False),  # five blocks of one window and one of 20 rows, A = 2
        (128, 8, True),
        (129, 5, False),  # A = 2 as at nnz 8, then the fewest blocks that cover k
        (200, 7, False),
        (1000, 8, False),
        (1792, 8, True),
        (2048, 16, True),
        (2100, 15, False),
        (2176, 16, False),
        (4096, 16, True),
        (5000, 16, False),
        (8000, 16, False),
        (8192, 16, True),  # a benchmark shape: keeps 16
        (8193, 31, False),  # 32 from 8193 on (v7), A = 17, then the fewest blocks that cover k
        (8704, 32, True),
        (10000, 32, False),
        (12000, 32, False),
        (13835, 31, False),
        (16384, 32, True),
    ],
)
def test_default_nnz_takes_the_windowed_layout_from_k_16(k, nnz, lattice):
    """The rule (docs/spec.md 2b): 8 nonzeros (16 from 2048, 32 from 8193), trimmed to the fewest
    blocks of the same windows that cover k and to k / 16; every k >= 16 is windowed, and off the
    lattice its blocks are whole windows from aligned rows, the last cut at k."""
    assert spec.default_nnz(k) == nnz
    assert spec.is_windowed(k, nnz)
    assert (spec.max_fold(k, nnz) == 0) == lattice
    blocks = [spec.windowed_block_rows(t, k, nnz) for t in range(nnz)]
    assert [start for start, _ in blocks] == [0] + [start + size for start, size in blocks[:-1]]
    assert blocks[-1][0] + blocks[-1][1] == k
    windows = spec.windows_per_block(k, nnz)
    assert all(start % 16 == 0 and 16 <= size <= 16 * windows for start, size in blocks)
    assert all(size % 16 == 0 for _, size in blocks[:-1])


def test_default_nnz_is_windowed_with_blocks_of_16_rows_for_every_k():
    for k in [*range(16, 20000), 2**20 + 7]:
        nnz = spec.default_nnz(k)
        assert 1 <= nnz <= (32 if k > 8192 else 16 if k >= 2048 else 8) and spec.WINDOW * nnz <= k, k
        assert 0 <= spec.max_fold(k, nnz) <= spec.WINDOW, k


def test_default_nnz_is_32_beyond_8192_and_16_up_to_it():
    """v7: 32 nonzeros from k = 8193 on (31 where 31 blocks of the same windows cover k), 16 from
    2048 to 8192; multiples of 512 beyond 8192 are on nnz 32's lattice."""
    assert spec.VERY_LARGE_K == 8193 and spec.VERY_LARGE_K_NNZ == 32
    assert {spec.default_nnz(k) for k in range(2048, 8193)} == {15, 16}
    assert {spec.default_nnz(k) for k in range(8193, 20000)} == {31, 32}
    for k in range(8704, 2**15 + 1, 512):
        assert spec.default_nnz(k) == 32 and spec.max_fold(k, 32) == 0, k


@pytest.mark.parametrize("k", [16, 100, 1000, 2048, 5000, 8192, 8193, 10000, 12000, 16384, 2**20 + 7])
@pytest.mark.parametrize("nnz", [1, 8, 16, 24, 31, 32, "default"])
def test_every_matrix_of_v6_is_the_v7_one(k, nnz):
    """v7 changed only the default nnz, which saved states record: every (k, nnz) that loaded
    under v6 still loads, and the current version is always among the accepted ones."""
    nnz = spec.default_nnz(k) if nnz == "default" else min(nnz, k)
    same_since = spec.sparse_jl_same_since(k, nnz)
    assert 6 in same_since and same_since[-1] == spec.SPEC_VERSION == 7, (k, nnz)


@pytest.mark.parametrize("k,nnz", [(7, 7), (15, 8), (100, 7), (200, 13), (40, 4)])
def test_the_classic_layout_serves_blocks_under_16_rows(k, nnz):
    assert not spec.is_windowed(k, nnz)


def test_seed_from_key_inverts_philox_key():
    for seed in (0, 1, 2**32 - 1, 2**32, 0xDEADBEEF_12345678, 2**64 - 1):
        assert spec.seed_from_key(*spec.philox_key(seed)) == seed


def test_numpy_float_dtypes_are_the_float_dtypes_numpy_has():
    assert spec.NUMPY_FLOAT_DTYPES == ("float16", "float32", "float64")
    assert set(spec.NUMPY_FLOAT_DTYPES) < set(spec.FLOAT_DTYPES)


def test_band_rotations_follow_the_spec():
    """R_(g,b) = word (b mod 4) of Philox(counter=(g mod 2**32, g div 2**32, b div 4, 'SJLG')),
    times A, >> 32 (docs/spec.md 2b), for five bands (nnz 40), groups past 2**32."""
    seed, windows = 2**40 + 1, 5
    k0, k1 = spec.philox_key(seed)
    g = torch.arange(2**32 - 150, 2**32 + 150, dtype=torch.int64)
    rotations = reference.window_rotations(g, windows, seed, 40)
    assert rotations.shape == (300, spec.band_count(40)) == (300, 5)
    for band in range(5):
        words = reference.philox4x32_10(
            g & 0xFFFFFFFF, g >> 32, torch.full_like(g, band // 4), spec.DOMAIN_SPARSE_JL_GROUP, k0, k1
        )
        assert torch.equal(rotations[:, band], (words[band % 4] * windows) >> 32)
