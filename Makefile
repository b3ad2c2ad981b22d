# aorta — developer entry points. `make test` goes from a fresh clone to a green run.
PYTHON ?= python3
VENV ?= .venv
# A GPU user overrides this, e.g. `make dev TORCH='torch==2.13.0 --index-url https://download.pytorch.org/whl/rocm6.4'`.
TORCH ?= torch==2.13.0
RECIPE ?= recipes/cpu-smoke.yaml
CLUSTER ?= cluster.json
PYTEST_ARGS ?=
# Test workers (pytest-xdist). The real-process tests spend much of their time waiting on
# sshd, Slurm, Docker, torchrun rendezvous and deadlines, so more workers than cores pays (on
# 2 cores, a fresh clone's .ci/run: 739 s with 4 workers, 686 s with 6); files stay whole on
# one worker so module-scoped sweeps run once.
XDIST ?= 6
FAST_XDIST ?= 2

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The tests write bytecode caches even where PYTHONDONTWRITEBYTECODE is set (as on the CI
# machines): every sweep, rank and trial process they start imports aorta, and every xdist
# worker collects every test module; without caches each compiles them again (collecting: 7.0
# -> 3.8 CPU-s per worker; importing a sweep's modules: 0.95 -> 0.6 CPU-s per process).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

.PHONY: dev test test-fast durations lint format sweep launch bench docs clean

dev: $(STAMP)

# uv installs in parallel (a fresh venv on 2 cores: 25 s against pip's 72 s). It does not read
# pip's settings, so a site's mirror and wheel folder (PIP_INDEX_URL, PIP_FIND_LINKS) are passed
# on; where uv cannot install (a mirror set only in pip.conf, no uv wheel), pip does, as before.
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python \
	$(if $(PIP_INDEX_URL),--index-url $(PIP_INDEX_URL)) $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS))
# The editable install is a path in a .pth file (setuptools' compat mode), not its import hook:
# the hook imported pathlib, re and enum into every Python the venv starts (36 -> 15 ms a
# start; a test run starts ~1,000, most of them tiny trial commands).
# Bytecode for what sweeps, workloads and the tests import, written by importing it (two
# processes, one per core): where PYTHONDONTWRITEBYTECODE is set (as on the CI machines) every
# process would otherwise compile torch again. Not uv's --compile-bytecode: it compiles all
# ~13,000 modules of the venv (37 CPU-s, 20 s on 2 cores) for the ~3,600 imported (15 CPU-s, 9 s).
WARM = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c
WARM_TORCH = import torch.distributed.fsdp, torch.profiler
WARM_REST = import aorta.cli, aorta.trace, pandas, xarray, h5netcdf, scipy.stats, matplotlib.pyplot
WARM_REST += ; import pytest, hypothesis, xdist, nbclient, ipykernel
# The `cluster` extra (pyproject.toml) goes beside the venv, not into it: with dask importable,
# xarray imports dask.array in every process that builds a Dataset (~0.45 CPU-s; ~100 sweep,
# rank and CLI processes a test run). Only the LocalCluster test adds it to its sys.path, after
# the venv's packages. tests/layout checks it names pyproject's extra.
CLUSTER_SITE := $(VENV)/cluster-extra
CLUSTER_EXTRA ?= dask[distributed]>=2024.1

# The venv starts without pip: the calling Python's pip puts uv in it (`--python`, pip >= 22.3)
# and uv adds pip, which spares venv's own pip bootstrap (ensurepip: 5.5 of a fresh clone's 23 s
# `make dev`). Where that pip is older or missing, the venv bootstraps its pip as before.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install -q uv || { $(BIN)/python -m ensurepip --default-pip && $(BIN)/python -m pip install -q uv; } || true
	$(UV_INSTALL) pip || $(BIN)/python -m ensurepip --default-pip
	$(UV_INSTALL) $(TORCH) || $(BIN)/python -m pip install -q $(TORCH)
	$(UV_INSTALL) -e '.[test]' -C editable_mode=compat || $(BIN)/python -m pip install -q -e '.[test]' -C editable_mode=compat
	$(UV_INSTALL) --target $(CLUSTER_SITE) '$(CLUSTER_EXTRA)' || $(BIN)/python -m pip install -q --target $(CLUSTER_SITE) '$(CLUSTER_EXTRA)'
	$(WARM) '$(WARM_TORCH)' & torch=$$!; $(WARM) '$(WARM_REST)' && wait $$torch
	touch $(STAMP)

# What the test targets collect. A path in PYTEST_ARGS (a word naming a file or folder, or
# file::test) replaces them, so `make test-fast PYTEST_ARGS=tests/trace` runs the trace tests
# alone; other words (-k, -x, -m "not docker") only add to the run.
TEST_PATHS ?= aorta tests notebooks
FAST_PATHS ?= aorta tests
ARG_PATHS = $(foreach w,$(PYTEST_ARGS),$(if $(wildcard $(firstword $(subst ::, ,$(w)))),$(w)))
paths = $(if $(strip $(ARG_PATHS)),,$(1))

test: dev
	$(PYTEST) -n $(XDIST) --dist loadfile --no-loadscope-reorder --doctest-modules --nbmake $(call paths,$(TEST_PATHS)) --durations=15 $(PYTEST_ARGS)

# The edit loop (<= 2 min on 2 cores): unit, property and doctests. Everything that starts a
# sweep process, sshd, Slurm, Docker, Chromium or torchrun is `slow`; no notebooks.
test-fast: dev
	$(PYTEST) -n $(FAST_XDIST) --doctest-modules $(call paths,$(FAST_PATHS)) -m "not slow" $(PYTEST_ARGS)

# The slowest tests of a tier, to keep the edit loop honest: `make durations MARK="not slow"`.
MARK ?= not slow
durations: dev
	$(PYTEST) --doctest-modules $(call paths,$(FAST_PATHS)) -m "$(MARK)" -q --durations=25 $(PYTEST_ARGS)

# MYPY_ARGS: .ci/run passes --cache-dir=/dev/null (a fresh clone's cache is never read again;
# writing it costs ~4 of mypy's ~25 CPU-s).
MYPY_ARGS ?=
lint: dev
	$(BIN)/ruff format --check aorta tests benchmarks
	$(BIN)/ruff check aorta tests benchmarks
	$(BIN)/mypy $(MYPY_ARGS)

format: dev
	$(BIN)/ruff format aorta tests benchmarks
	$(BIN)/ruff check --fix aorta tests benchmarks

sweep: dev
	$(BIN)/aorta sweep run --recipe $(RECIPE)

launch: dev
	$(BIN)/aorta launch --cluster $(CLUSTER) --recipe $(RECIPE)

bench: dev
	$(BIN)/python benchmarks/run_all.py

# The notebooks with their outputs as HTML (nbclient comes with the test extra, via nbmake;
# no nbconvert), and the README's figure from a real CPU sweep.
docs: dev
	$(BIN)/python docs/notebooks/render.py notebooks docs/notebooks
	$(BIN)/python docs/readme_figure.py docs/readme_matrix.png

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache .mypy_cache build *.egg-info
	find aorta tests benchmarks docs -name __pycache__ -prune -exec rm -rf {} +
