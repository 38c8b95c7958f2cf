# One entry point for set-up, tests, the demo and the benchmarks.
# The environment is a venv inside the repository. torch is pinned first so that pip never
# resolves an unpinned torch to a multi-GB CUDA build (on a machine with a local CPU wheel of
# torch 2.13.0, that wheel is used; elsewhere pass TORCH="torch==2.13.0 --index-url ...").
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin

RUFF ?= ruff==0.17.6
# pytest-xdist workers: one per core; idle workers take queued tests from busy ones (worksteal),
# so the long compile tests never queue behind each other. PYTEST_ARGS adds flags (CI: coverage).
TEST_WORKERS ?= auto
PYTEST_ARGS ?=
PYTEST = $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=10 $(PYTEST_ARGS)

.PHONY: setup setup-test test test-slow test-all lint demo bench-cpu bench-gpu gpu-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)

setup: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[cpu,parquet,plot,examples]"

setup-test: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"

# The fast tier (what a change needs): a few minutes. The thorough tier (`-m slow`): exhaustive
# kernel grids, every compile variant, large files, the demo. CI runs both.
test: setup-test
	$(PYTEST)

test-slow: setup-test
	$(PYTEST) -m slow

test-all: setup-test
	$(PYTEST) -m "slow or not slow"

lint: $(BIN)/python
	$(BIN)/python -m pip install --quiet "$(RUFF)"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

demo: setup
	$(BIN)/python examples/demo.py

bench-cpu: setup-test
	$(BIN)/python benchmarks/bench_cpu.py

# On the GPU machine (torch and triton preinstalled): install without touching them, test, benchmark.
gpu-test:
	$(PYTHON) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PYTHON) -c "import sjlt.kernels"
	$(PYTHON) -m pytest -q -n 8 --dist worksteal -m "slow or not slow" tests $(PYTEST_ARGS)

bench-gpu:
	$(PYTHON) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PYTHON) -c "import sjlt.kernels"
	$(PYTHON) benchmarks/bench_gpu.py --out benchmarks/bench_gpu_latest.md

clean:
	rm -rf $(VENV) build dist *.egg-info
