"""Print the evidence that the GPU kernels and the reference agree (for release notes):

    python benchmarks/check_gpu_equivalence.py

Philox known answers from the Triton core, the SJLT matrix from the kernel's hash table against
the reference's, forward/transpose errors against float64, and dropout masks bit for bit.
"""

import torch

import sjlt
from sjlt import functional as F
from sjlt import reference
from sjlt.kernels.philox import philox_blocks_kernel

KNOWN = [
    ((0, 0, 0, 0), (0, 0)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)),
]


def main() -> None:
    device = "cuda"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, sjlt spec v{sjlt.SPEC_VERSION}")
    counters = torch.tensor([c for c, _ in KNOWN], dtype=torch.int64, device=device)
    keys = torch.tensor([k for _, k in KNOWN], dtype=torch.int64, device=device)
    out = torch.empty(len(KNOWN), 4, dtype=torch.int64, device=device)
    philox_blocks_kernel[(1,)](counters, keys, out, len(KNOWN), BLOCK=128)
    for (c, k), words in zip(KNOWN, out.tolist()):
        print(
            "philox",
            " ".join(f"{v:08x}" for v in c),
            "|",
            " ".join(f"{v:08x}" for v in k),
            "->",
            " ".join(f"{v:08x}" for v in words),
        )
    gen = torch.Generator(device=device).manual_seed(0)
    for d, k, nnz, offset, seed in [(1000, 256, 8, 0, 1), (4133, 4096, 8, 2**33, 2**64 - 1), (65, 17, 17, 5, 99)]:
        a = F.sparse_jl_matrix(d, k, seed=seed, nnz=nnz, column_offset=offset, backend="triton", device=device)
        b = F.sparse_jl_matrix(d, k, seed=seed, nnz=nnz, column_offset=offset, backend="torch")
        same = torch.equal(a.indices().cpu(), b.indices()) and torch.equal(a.values().cpu(), b.values())
        print(f"matrix d={d} k={k} nnz={nnz} offset={offset} seed={seed}: kernel == reference: {same}")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(777, 1031, device=device, generator=gen).to(dtype)
        want = reference.sparse_jl_forward(x.double().cpu(), 300, seed=5, nnz=8)
        got = F.sparse_jl(x, 300, seed=5).double().cpu()
        y = torch.randn(777, 300, device=device, generator=gen).to(dtype)
        want_t = reference.sparse_jl_transpose(y.double().cpu(), 1031, seed=5, nnz=8)
        got_t = F.sparse_jl_transpose(y, 1031, seed=5).double().cpu()

        def rel(g, w):
            return float((g - w).abs().max() / w.abs().max())

        print(
            f"sparse_jl {str(dtype)[6:]}: forward rel err {rel(got, want):.1e}, transpose rel err {rel(got_t, want_t):.1e}"
        )
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = torch.randn(3, 1000, 333, device=device, generator=gen).to(dtype)
        got = F.seeded_dropout(x, 0.3, seed=2**63 + 5)
        want = F.seeded_dropout(x.cpu(), 0.3, seed=2**63 + 5, backend="torch")
        print(
            f"seeded_dropout {str(dtype)[6:]}: GPU kernel == CPU reference bit for bit: {torch.equal(got.cpu(), want)}; "
            f"keep rate {float((got != 0).double().mean()):.4f}"
        )


if __name__ == "__main__":
    main()
