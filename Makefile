# The two set-up commands of the README: `make report` (the main job) and `make test` (the test suite).
# Each creates .venv with python3 and installs what it needs (pinned by constraints.txt) on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache
export MPLBACKEND := Agg

.PHONY: report test test-all bench docs mutate install clean gpu-check

$(STAMP): setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip || $(PYTHON) tools/index_reachable.py
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[all]" || { $(PYTHON) tools/index_reachable.py; exit 1; }
	touch $(STAMP)

install: $(STAMP)

## The theory-vs-practice report at the CPU-sized default: writes report/report.html. SCHEDULER=local (a Dask
## LocalCluster) or SCHEDULER=tcp://HOST:8786 builds on a Dask cluster (the dask extra); JOBS sets the worker count.
SCHEDULER ?=
JOBS ?=
report: $(STAMP)
	$(BIN)/python -m figures report --preset quick --out report $(if $(SCHEDULER),--scheduler $(SCHEDULER)) \
		$(if $(JOBS),--jobs $(JOBS))

## The test suite (slow and gpu tests excluded; see setup.cfg). pytest exits non-zero when no test ran.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --timeout 900 -q

## Everything, slow tests included (tens of minutes).
test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not gpu" -q

## Benchmarks: throughputs and ratios against plain numpy/scipy baselines measured in the same run.
bench: $(STAMP)
	$(BIN)/python -m benchmarks

## Mutation testing of closedform/ and dynamics/ (not CI; see docs/contributing.md): results/mutate/summary.md
MUTATE_ARGS ?= --sample 400 --seed 19 --max-minutes 75 --base HEAD
mutate: $(STAMP)
	$(BIN)/python tools/mutate.py $(MUTATE_ARGS)

## The documentation site (Sphinx + MyST; the gallery's examples run at tiny sizes); warnings are errors.
docs: $(STAMP)
	rm -rf docs/_build docs/auto_examples docs/api docs/cli docs/sg_execution_times.rst
	$(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) .numba_cache results report figures/out .pytest_cache .hypothesis docs/_build docs/auto_examples

## The prepared GPU check (tools/gpu_check.py): gpu tests, seeds/s GPU vs CPU, 1 % of a paper-preset figure; one JSON.
## Uses .venv's python when present, else python3 (on a GPU machine, its own torch); installs only missing packages
## (from .whl/ when present). GPU_DEVICE=cpu is the CI dry run; the summary goes to GPU_CHECK_OUT, else $OUT.
GPU_DEVICE ?= auto
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
gpu-check:
	PYTHONPATH=$(CURDIR) $(GPU_PYTHON) tools/gpu_check.py --install --device $(GPU_DEVICE) \
		$(if $(GPU_CHECK_OUT),--out $(GPU_CHECK_OUT))
