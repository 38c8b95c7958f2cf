"""Time to the first projection in a fresh process, and whether it imported torch._dynamo (issue 13).

python benchmarks/first_call_probe.py      (on a GPU machine)
"""

import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402 (timed)

t1 = time.perf_counter()
import sjlt  # noqa: E402

x = torch.randn(4, 64, device="cuda")
t2 = time.perf_counter()
y = sjlt.sparse_jl(x, 32, seed=1)
torch.cuda.synchronize()
t3 = time.perf_counter()
y = sjlt.sparse_jl(x, 32, seed=1)
torch.cuda.synchronize()
t4 = time.perf_counter()
print(
    f"import torch {t1 - t0:.2f}s; first sparse_jl {t3 - t2:.2f}s; second {1e3 * (t4 - t3):.2f} ms; torch._dynamo loaded: {'torch._dynamo' in sys.modules}"
)
