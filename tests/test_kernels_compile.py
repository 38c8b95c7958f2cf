"""Every kernel through the real Triton compiler for Hopper and Ampere, on a machine with no GPU.

The interpreter accepts code that the compiler rejects (annotated constexpr globals, integer
arguments specialised to the constant 1, list comprehensions, a ``return`` under a constexpr
``if`` followed by another ``return``: the compiler builds both); this catches that class of
error in CI. The compile runs in a subprocess because this test session interprets the kernels
(TRITON_INTERPRET=1 is fixed when they are decorated).

The fast tier compiles the first specialisation of every kernel for sm_90, a few seconds per
family; the thorough tier (``-m slow``) compiles all of them, for sm_90 and sm_80.
"""

import os
import subprocess
import sys

import pytest

I32, I64 = "i32", "i64"
# Kernels by family, each compiled in its own subprocess (so that pytest-xdist spreads them).
FAMILIES = {
    "classic": {
        "sparse_jl_forward_kernel",
        "sparse_jl_transpose_kernel",
        "sparse_jl_hash_kernel",
        "philox_blocks_kernel",
        "seeded_dropout_kernel",
        "resize_rows_kernel",
    },
    "windowed_forward": {
        "sparse_jl_windowed_forward_kernel",
        "sparse_jl_windowed_shuffle_forward_kernel",
        "window_table_kernel",
        "fold_spill_kernel",
        "fold_rows_kernel",
    },  # and the Gluon forward on sm_90
    "windowed_transpose": {"sparse_jl_windowed_transpose_kernel", "unfold_rows_kernel"},
}


def _transpose_variants(
    dtype, out_type, common, const, add_partial, paired, transpose_steps, twins=False, joined=(False, False)
):
    """The windowed transpose kernel's specialisations for one band pass and its steps; ``twins``:
    programs over two windows (``windowed._twins_windows``), ``joined`` (JOINED_PAIRS, WHOLE_GROUPS):
    each group's two chunks of the pair stored at once, and whether they are the whole group."""
    import torch

    from sjlt.ops import windowed

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    for groups, tile_left, pipelined in transpose_steps:
        yield (
            "sparse_jl_windowed_transpose_kernel",
            {
                "y_ptr": f"*{dtype}",
                "order_ptr": "*i32",
                "starts_ptr": "*i32",
                "out_ptr": f"*{out_type}",
                "partial_ptr": "*fp32",
                **common,
                "g_first": I32,
                "g_last": I32,
                "band": I32,
                "out_col0": I64,
                "partial_col0": I64,
                "out_features": I32,
                "stride_ym": I64,
                "stride_yk": I32,
                "stride_om": I64,
                "stride_od": I32,
                "stride_pm": I64,
                "stride_pd": I32,
            },
            {
                **const,
                "GROUPS": groups,
                "TILE_LEFT": tile_left,
                "ADD_PARTIAL": add_partial,
                "PAIRED": paired,
                "PIPELINED": pipelined,
                "PARTIAL_FIRST": windowed._partial_first(torch_dtype),
                "MULTIPLE": 4 if pipelined else 1,
                "TWINS": twins,
                "JOINED_PAIRS": joined[0],
                "WHOLE_GROUPS": joined[1],
            },
        )


def _segments(nnz, block_m):
    """SEGMENTS and MULTIPLE of a forward variant: grouped launches (``forward_blocks``) in some
    variants, single launches in the others, each with several of the powers of two that MULTIPLE
    takes."""
    grouped = {(16, 32): 16, (8, 128): 1, (3, 32): 4, (1, 16): 16}.get((nnz, block_m))
    single = {(24, 64): 8, (12, 64): 4, (16, 64): 2}.get((nnz, block_m), 1)
    return {"SEGMENTS": grouped is not None, "MULTIPLE": grouped or single}


def _variants():
    """(kernel name, signature, constexprs) for every specialisation the launchers can produce."""
    import torch
    import triton.language as tl

    from sjlt import spec
    from sjlt.ops import windowed
    from sjlt.ops._launch import Tiling, promote_every

    torch_dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

    for dtype, passes, dot in [
        ("fp32", 3, tl.bfloat16),
        ("fp32", 2, tl.bfloat16),
        ("fp32", 1, tl.bfloat16),
        ("bf16", 0, tl.bfloat16),
        ("fp16", 0, tl.float16),
    ]:
        for key_type in (I32, I64, "one"):
            const = {
                "DOMAIN": spec.DOMAIN_SPARSE_JL,
                "FP32_PASSES": passes,
                "DOT_DTYPE": dot,
                "BLOCK_M": 64,
                "BLOCK_N": 64,
                "BLOCK_D": 64,
            }
            promote = promote_every(passes, 1000, Tiling())
            key = I32
            if key_type == "one":  # the compiler turns integer arguments equal to 1 into constants
                const.update(nnz=1)
            else:
                key = key_type
            common = {"table_ptr": "*i32", "n": I32, "d": I32, "k": I32, "nnz": I32, "scale": "fp32"}
            const.pop("DOMAIN")
            yield (
                "sparse_jl_forward_kernel",
                {
                    "x_ptr": f"*{dtype}",
                    "out_ptr": f"*{dtype}",
                    **common,
                    "stride_xm": I64,
                    "stride_xd": I32,
                    "stride_om": I64,
                    "stride_ok": I32,
                    "stride_split": I64,
                    "cols_per_split": I64,
                },
                {**const, "PROMOTE_EVERY": promote},
            )
            yield (
                "sparse_jl_transpose_kernel",
                {
                    "y_ptr": f"*{dtype}",
                    "z_ptr": f"*{dtype}",
                    **common,
                    "stride_ym": I64,
                    "stride_yk": I32,
                    "stride_zm": I64,
                    "stride_zd": I32,
                },
                const,
            )
            hash_const = {"DOMAIN": spec.DOMAIN_SPARSE_JL, "BLOCK": 256}
            if key_type == "one":
                hash_const.update(key0=1, key1=1, nnz=1)
            yield (
                "sparse_jl_hash_kernel",
                {"table_ptr": "*i32", "d": I32, "k": I32, "nnz": I32, "column_offset": I64, "key0": key, "key1": key},
                hash_const,
            )
    for dtype, passes, dot in [
        ("fp32", 3, tl.bfloat16),
        ("fp32", 2, tl.bfloat16),
        ("fp32", 1, tl.bfloat16),
        ("bf16", 0, tl.bfloat16),
        ("fp16", 0, tl.float16),
    ]:
        for nnz, block_m in [(32, 32), (24, 64), (16, 64), (16, 32), (12, 64), (8, 128), (3, 32), (1, 16)]:
            blocks = windowed._band_blocks(nnz)
            const = {
                "NNZ": nnz,
                "BLOCKS": blocks,
                "BANDS": spec.band_count(nnz),
                "FP32_PASSES": passes,
                "DOT_DTYPE": dot,
                "BLOCK_M": block_m,
                "WIDTH": windowed._width(nnz),
                "FOLDS": nnz in (24, 16, 3),  # both branches compile, each in some variants
            }
            common = {
                "words_ptr": "*i32",
                "rotations_ptr": "*i32",
                "n": I32,
                "d": I64,
                "column_offset": I64,
                "group_base": I64,
                "groups_per_split": I32,
                "windows": I32,
                "scale": "fp32",
            }
            if nnz == 1:  # A = 1 and one split: the compiler makes these arguments constants
                const.update(windows=1, groups_per_split=1, scale=1.0)
            # The three windowed forwards (tile, 128-row, CUDA-core) share one signature.
            forward_signature = {
                "x_ptr": f"*{dtype}",
                "out_ptr": f"*{dtype}",
                "spill_ptr": "*fp32",
                "segments_ptr": "*i64",
                "split_segments_ptr": "*i64",
                **common,
                "out_features": I32,
                "groups": I32,
                "stride_xm": I64,
                "stride_xd": I32,
                "stride_om": I64,
                "stride_ok": I32,
                "stride_split": I64,
            }
            # steps of short, middling and long runs, for rows on 16 bytes and off them (element loads)
            steps = {
                windowed._forward_steps(torch_dtypes[dtype], groups, aligned, const["FOLDS"], const["BANDS"])
                for groups in (1, 64, 10**6)
                for aligned in (True, False)
            }
            tile_signature = forward_signature | {"stride_om_plain": I64}  # the tile forward's own
            for groups, unroll, _, pipelined in sorted(steps):
                yield (
                    "sparse_jl_windowed_forward_kernel",
                    tile_signature,
                    {
                        **const,
                        "GROUPS": groups,
                        "UNROLL": unroll,
                        "PROMOTE_EVERY": promote_every(passes, 1000, Tiling()),
                        "PIPELINED": pipelined,
                        "VECTOR_STORES": True,
                        **_segments(nnz, block_m),
                    },
                )
            if dtype != "fp32" and nnz in (16, 8) and block_m == 64:
                # 128-row forwards (_wide_rows) of aligned rows: pipelined steps, or any steps where
                # rows fold
                for groups, unroll, _, pipelined in sorted(
                    {
                        windowed._forward_steps(torch_dtypes[dtype], run, True, const["FOLDS"], const["BANDS"])
                        for run in (1, 10**6)
                    }
                    # and of rows off 16 bytes with too few 64-row programs (_widens_misaligned_rows)
                    | {
                        windowed._forward_steps(torch_dtypes[dtype], 1, False, bands=const["BANDS"], wide_vector_rows=w)
                        for w in (False, True)
                    }
                ):
                    if pipelined or const["FOLDS"]:
                        yield (
                            "sparse_jl_windowed_forward_kernel",
                            tile_signature,
                            {
                                **const,
                                "BLOCK_M": windowed._WIDE_ROWS,
                                "GROUPS": groups,
                                "UNROLL": unroll,
                                "PROMOTE_EVERY": 0,
                                "PIPELINED": pipelined,
                                "VECTOR_STORES": False,
                                **_segments(nnz, block_m),
                            },
                        )
            # the CUDA-core forward (_shuffles): exact float32 and half types to 32 rows
            if (dtype != "fp32" or passes == 3) and block_m in (32, 16):
                yield (
                    "sparse_jl_windowed_shuffle_forward_kernel",
                    forward_signature | {"slots_ptr": "*i32"},
                    {key: const[key] for key in ("NNZ", "BLOCKS", "BANDS", "FOLDS", "BLOCK_M")}
                    | {key: const[key] for key in ("windows", "groups_per_split", "scale") if key in const}
                    | _segments(nnz, block_m)
                    | {"SLOTS": windowed._SHUFFLE_SLOTS},
                )
            # The transpose: one launch for one band, or for two (PAIRED) where runs are long; else
            # band passes that store, then add to float32 sums (a half type's workspace until the
            # last band rounds into z).
            bands = spec.band_count(nnz)
            per_band = [(out, add, False) for out in sorted({dtype, "fp32"}) for add in (False, True)]
            band_passes = {
                1: [(dtype, False, False)],
                # two bands: one launch, and launches per band where runs are short (d = 4096)
                2: [(dtype, False, True)] + (per_band if block_m == 64 else []),
            }.get(bands, per_band)
            for out_type, add_partial, paired in band_passes:
                transpose_steps = [
                    (
                        windowed._TRANSPOSE_GROUPS,
                        windowed._TRANSPOSE_TILE_LEFT,
                        windowed._transpose_pipelined(torch_dtypes[dtype], bands, paired, block_m),
                    )
                ]
                if dtype == "fp32" and passes == 3 and nnz in (16, 8) and (bands == 1 or paired):  # sweeps' steps
                    transpose_steps += [(2, False, False), (2, False, True), (4, True, not transpose_steps[0][2])]
                yield from _transpose_variants(dtype, out_type, common, const, add_partial, paired, transpose_steps)
            if bands == 1:  # twin windows, unpipelined by default
                twin_steps = [
                    (
                        windowed._TRANSPOSE_GROUPS,
                        windowed._TRANSPOSE_TILE_LEFT,
                        windowed._transpose_pipelined(torch_dtypes[dtype], bands, False, block_m, twins=True),
                    )
                ]
                for joined in ((False, False), (True, False), (True, True)):
                    yield from _transpose_variants(
                        dtype, dtype, common, const, False, False, twin_steps, twins=True, joined=joined
                    )
    for nnz in (32, 16, 12, 8, 7, 3, 1):
        block, quads = windowed.table_tiling(nnz)
        const = {
            "NNZ": nnz,
            "BANDS": spec.band_count(nnz),
            "DOMAIN_WINDOW": spec.DOMAIN_SPARSE_JL_WINDOW,
            "DOMAIN_GROUP": spec.DOMAIN_SPARSE_JL_GROUP,
            "BLOCK": block,
            "QUADS": quads,
        }
        if nnz == 1:
            const.update(key0=1, key1=1, windows=1)
        yield (
            "window_table_kernel",
            {
                "words_ptr": "*i32",
                "rotations_ptr": "*i32",
                "group_base": I64,
                "groups": I32,
                "windows": I32,
                "key0": I32,
                "key1": I32,
            },
            const,
        )
    for dtype in ("fp32", "bf16", "fp16"):
        for aligned in (False, True):  # k a multiple of 16 or not, as the launcher specialises it
            yield (
                "fold_spill_kernel",
                {
                    "spill_ptr": "*fp32",
                    "out_ptr": f"*{dtype}",
                    "n": I32,
                    "out_features": I32,
                    "windows": I32,
                    "splits": I32,
                    "stride_om": I64,
                },
                {"stride_ok": 1, "NNZ": 16, "COLUMNS": 512},
                ("spill_ptr", "out_ptr") + (("out_features", "windows", "stride_om") if aligned else ()),
            )
    for dtype in ("fp32", "bf16", "fp16"):
        for stride_yk, divisible in [(1, ()), (1, ("n", "stride_ym")), (None, ("out_features",))]:
            signature = {"y_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "n": I32, "out_features": I32}
            signature |= {"windows": I32, "stride_ym": I64} | ({} if stride_yk else {"stride_yk": I64})
            const = {"NNZ": 16, "BLOCK_M": 16, "BLOCK_U": 256, "PAIRS": 1} | ({"stride_yk": 1} if stride_yk else {})
            yield "unfold_rows_kernel", signature, const, ("y_ptr", "out_ptr") + divisible
    signature = {"y_ptr": "*i32", "out_ptr": "*i32", "n": I32, "out_features": I32, "windows": I32, "stride_ym": I64}
    const = {"stride_yk": 1, "NNZ": 16, "BLOCK_M": 1, "BLOCK_U": 1024, "PAIRS": 2}
    yield "unfold_rows_kernel", signature, const, ("y_ptr", "out_ptr")
    for dtype in ("fp32", "bf16", "fp16"):
        for divisible in [("stride_ym",), ("n", "out_features", "stride_ym", "stride_om")]:  # Y' is 16 A nnz wide
            signature = {"y_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "n": I32, "out_features": I32}
            signature |= {"windows": I32, "stride_ym": I64, "stride_om": I64}
            const = {"stride_yk": 1, "stride_ok": 1, "NNZ": 7, "BLOCK_M": 16, "BLOCK_K": 256}
            yield "fold_rows_kernel", signature, const, ("y_ptr", "out_ptr") + divisible
    yield (
        "philox_blocks_kernel",
        {"counter_ptr": "*i64", "key_ptr": "*i64", "out_ptr": "*i64", "n": I32},
        {"BLOCK": 128},
    )
    for dtype, compute in [("fp32", "fp32"), ("bf16", "fp32"), ("fp16", "fp32"), ("fp64", "fp64")]:
        for per_row, contiguous in [(False, True), (False, False), (True, False)]:
            yield (
                "seeded_dropout_kernel",
                {
                    "x_ptr": f"*{dtype}",
                    "y_ptr": f"*{dtype}",
                    "seeds_ptr": "*i64",
                    "scale_ptr": f"*{compute}",
                    "n_rows": I32,
                    "n_cols": I64,
                    "stride_xr": I64,
                    "stride_xc": I32,
                    "threshold": I64,
                },
                {"DOMAIN": spec.DOMAIN_DROPOUT, "PER_ROW_SEED": per_row, "CONTIGUOUS": contiguous, "BLOCK": 1024},
            )
    for dtype in ("fp32", "bf16", "fp16"):
        for rows, const in [(32, {"stride_xk": 1}), (8, {"stride_xk": 1}), (1, {})]:
            signature = {"x_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "n": I32, "width_in": I32, "width_out": I32}
            signature |= {"inverse_width_out": "fp32", "stride_xm": I64} | ({} if const else {"stride_xk": I32})
            yield "resize_rows_kernel", signature, const | {"ROWS": rows, "BLOCK": 1024}, ("x_ptr", "out_ptr")


def _gluon_variants():
    """(signature, constexprs) of the Gluon forward (sm_90 only) for the launcher's and the tests'
    rows, steps and stages."""
    from sjlt import spec
    from sjlt.ops import windowed

    for dtype in ("bf16", "fp16"):
        for nnz, block_n, groups, stages in [
            (16, 128, *windowed._GLUON_STEPS),
            (8, 128, *windowed._GLUON_STEPS),
            (4, 64, *windowed._GLUON_STEPS),
            (3, 64, 2, 3),
            (12, 128, 1, 2),
            (24, 64, 4, 3),
        ]:
            yield (
                {
                    "x_ptr": f"*{dtype}",
                    "words_ptr": "*i32",
                    "rotations_ptr": "*i32",
                    "out_ptr": f"*{dtype}",
                    "n": I32,
                    "d": I64,
                    "column_offset": I64,
                    "group_base": I64,
                    "groups": I32,
                    "groups_per_split": I32,
                    "windows": I32,
                    "scale": "fp32",
                    "out_features": I32,
                    "stride_xm": I64,
                    "stride_om": I64,
                    "stride_ok": I32,
                    "stride_split": I64,
                },
                {
                    "NNZ": nnz,
                    "BLOCKS": windowed._band_blocks(nnz),
                    "BANDS": spec.band_count(nnz),
                    "BLOCK_N": block_n,
                    "WIDTH": max(windowed._width(nnz), windowed._GLUON_MIN_WIDTH),
                    "GROUPS": groups,
                    "STAGES": stages,
                    "WARPS": 4,
                    "MULTIPLE": 8 if nnz == 8 else 16,  # 8: rows 16-byte aligned but off 16 elements
                },
            )


def compile_gluon(target, first_only=False) -> int:
    """The Gluon forward, with the arguments the launcher guarantees divisible by 16 marked so, and
    d, the column offset and the row stride by MULTIPLE (its cp.async copies need 16 bytes proven)."""
    import triton
    from triton.experimental.gluon._runtime import GluonASTSource

    from sjlt.kernels.sparse_jl_windowed_gluon import sparse_jl_windowed_gluon_forward_kernel as kernel

    failures = 0
    variants = list(_gluon_variants())
    for signature, const in variants[:1] if first_only else variants:
        signature = dict(signature, **{c: "constexpr" for c in const})
        divided = ("d", "column_offset", "stride_xm") if const["MULTIPLE"] == 16 else ()
        divisible = [i for i, name in enumerate(signature) if name in ("x_ptr", "out_ptr", "stride_om", *divided)]
        attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
        try:
            compiled = triton.compile(GluonASTSource(kernel, signature, const, attrs), target=target)
            assert "wgmma.mma_async" in compiled.asm["ptx"] and "cp.async" in compiled.asm["ptx"], "no wgmma/cp.async"
        except Exception as exc:
            failures += 1
            print(f"FAILED sm_{target.arch} gluon {signature} {const}:\n{exc}\n", flush=True)
    return failures


def _first_of_each(variants):
    """The first specialisation of each kernel name, in the order the generator gives them."""
    seen = set()
    for variant in variants:
        if variant[0] not in seen:
            seen.add(variant[0])
            yield variant


def compile_kernels(arch: int, family: str, every: bool) -> int:
    """Compile the kernels of ``family`` (a key of FAMILIES): every specialisation, or the first
    of each kernel name."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from sjlt.kernels import dropout, philox, resize_rows, sparse_jl, sparse_jl_windowed

    kernels = {
        name: getattr(module, name)
        for module in (dropout, philox, resize_rows, sparse_jl, sparse_jl_windowed)
        for name in dir(module)
        if name.endswith("_kernel")
    }
    target = GPUTarget("cuda", arch, 32)
    failures = 0
    variants = [v for v in _variants() if v[0] in FAMILIES[family]]
    for name, signature, const, *divisible in variants if every else _first_of_each(variants):
        signature = dict(signature)
        for c in const:
            signature.setdefault(c, "constexpr")
        # arguments the launcher's specialisation marks divisible by 16 (pointers and integers)
        names = list(kernels[name].arg_names)
        attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in (divisible[0] if divisible else ())}
        try:
            source = ASTSource(fn=kernels[name], signature=signature, constexprs=const, attrs=attrs)
            compiled = triton.compile(source, target=target)
            assert compiled.asm.get("ptx"), "no PTX"
        except Exception as exc:  # report every failing variant, not just the first
            failures += 1
            print(f"FAILED sm_{arch} {name} {signature} {const}:\n{exc}\n", flush=True)
    if arch == 90 and family == "windowed_forward":  # the Gluon forward is Hopper's (wgmma)
        failures += compile_gluon(target, first_only=not every)
    return failures


def _compile_in_subprocess(arch: int, family: str, every: bool, cache_dir):
    # A fresh cache: a kernel compiled by an earlier run must still be compiled here.
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(cache_dir))
    result = subprocess.run(
        [sys.executable, __file__, str(arch), family, "every" if every else "first"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_kernel_compiles_for_hopper(family, tmp_path):
    _compile_in_subprocess(90, family, False, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("arch", [90, 80])
def test_every_kernel_variant_compiles_for(arch, family, tmp_path):
    _compile_in_subprocess(arch, family, True, tmp_path)


if __name__ == "__main__":
    sys.exit(min(compile_kernels(int(sys.argv[1]), sys.argv[2], sys.argv[3] == "every"), 1))
