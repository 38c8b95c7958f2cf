"""sjlt inside torch's machinery: torch.compile, autocast and CUDA graphs (the README's example).

    python examples/torch_integration.py            # CPU: compile with aot_eager; GPU: inductor + a CUDA graph

A SeededDropout keeps its call counter on the device, so a compiled training step compiles once
and a captured CUDA graph draws a fresh mask on every replay; under autocast SparseJL runs in the
autocast dtype, as nn.Linear does. Prints what it checked.
"""

from __future__ import annotations

import torch
import torch._dynamo

import sjlt


def model(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024),
        torch.nn.ReLU(),
        sjlt.SeededDropout(0.1, seed=7),  # the seed advances on the device, call by call
        sjlt.SparseJL(1024, 256, seed=1),  # fixed matrix, regenerated from its seed
        torch.nn.Linear(256, 10),
    ).to(device)


def compiled_training(device: str, steps: int = 20) -> int:
    """Trains for ``steps`` under torch.compile(fullgraph=True); returns the graphs compiled."""
    torch._dynamo.reset()
    net = model(device)
    backend = "inductor" if device == "cuda" else "aot_eager"
    step_model = torch.compile(net, fullgraph=True, backend=backend)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(steps):
            opt.zero_grad()
            step_model(torch.randn(32, 512, device=device)).square().mean().backward()
            opt.step()
    return torch._dynamo.utils.counters["stats"]["unique_graphs"] - before


def autocast_dtype(device: str) -> torch.dtype:
    with torch.autocast(device, dtype=torch.bfloat16):
        return model(device)(torch.randn(4, 512, device=device)).dtype


def cuda_graph_masks(replays: int = 3) -> list[torch.Tensor]:
    """Captures one dropout call and replays it; returns each replay's keep mask."""
    drop = sjlt.SeededDropout(0.5, seed=3).cuda()
    x = torch.ones(8, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        drop(x)  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = drop(x)
    masks = []
    for _ in range(replays):
        graph.replay()
        masks.append(out != 0)
    return masks


def main() -> dict:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {
        "graphs compiled in 20 steps": compiled_training(device),
        "output dtype under autocast(bfloat16)": autocast_dtype(device),
    }
    if device == "cuda":
        masks = cuda_graph_masks()
        results["distinct masks in 3 CUDA-graph replays"] = len({tuple(m.flatten().tolist()) for m in masks})
    for name, value in results.items():
        print(f"{name}: {value}")
    return results


if __name__ == "__main__":
    main()
