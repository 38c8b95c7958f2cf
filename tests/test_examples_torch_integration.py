"""examples/torch_integration.py, the README's torch.compile / autocast / CUDA-graph example, runs
and shows what it promises: one compiled graph for 20 training steps, autocast's dtype, and (on a
GPU) a fresh mask per CUDA-graph replay."""

import importlib.util
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "torch_integration.py"


def test_example_runs_and_holds_its_promises():
    spec = importlib.util.spec_from_file_location("torch_integration_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        results = module.main()
    finally:
        del sys.modules[spec.name]
    assert results["graphs compiled in 20 steps"] == 1
    assert results["output dtype under autocast(bfloat16)"] == torch.bfloat16
    if torch.cuda.is_available():
        assert results["distinct masks in 3 CUDA-graph replays"] == 3
