# Two commands do all set-up: `make book` and `make test` (see README.md).
# Both create .venv when it is missing and reinstall only when a requirements file changed.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pip prints one harmless line per package about the mirror layout; hide those.
QUIET_PIP := { grep -v "is ignored: it is neither a file nor a directory" || true; }
CHAPTERS := $(sort $(wildcard book/[0-9]*.ipynb))
APPENDICES := $(sort $(wildcard book/appendix_*.ipynb))
# Every notebook of the book: the chapters, the appendices, one solutions notebook per chapter.
NOTEBOOKS := $(CHAPTERS) $(APPENDICES) $(sort $(wildcard book/solutions/[0-9]*.ipynb))
# Debian packages besides Python's, installed by `setup` when the machine can (root or
# password-less sudo) and otherwise named with the command to run; under CI=true a missing
# one fails the run. chromium: tools/check_built_book.py opens every page of the book in it.
# dataset-fashion-mnist: the original Fashion-MNIST files, read offline by chapter 8.
SYSTEM_PACKAGES := chromium dataset-fashion-mnist

.PHONY: help setup system-packages test lint pytest book book-only notebooks colab-cells bench lock clean \
	test-elsewhere slow-tests foreign-cpu colab-check old-torch

help:
	@echo "make book       set up .venv if needed, build the HTML book into _build/html"
	@echo "make test       set up .venv if needed, ruff, pytest (unit but slow + doctest + nbval),"
	@echo "                book build"
	@echo "make test-elsewhere  the slower checks: the slow tests, Colab on a foreign CPU,"
	@echo "                the oldest torch"
	@echo "make notebooks  re-execute every notebook in place (after changing a module);"
	@echo "                NB=book/01_attention.ipynb for one"
	@echo "make colab-cells  rewrite each notebook's Colab badge and install cell from _config.yml"
	@echo "make bench      run the scripts in benchmarks/"
	@echo "make lock       rewrite constraints.txt with the exact versions in .venv"

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@free_gb=$$(df -Pk . | awk 'NR == 2 {print int($$4 / 1048576)}'); \
	if [ "$$free_gb" -lt 8 ]; then echo "warning: $$free_gb GB free on this disk; the pinned" \
	  "dependencies take about 7 GB (torch and its CUDA libraries): pip may fail with" \
	  "'No space left on device'"; fi
	@echo "Installing pinned dependencies into $(VENV) (once; later runs reuse it)"
	$(BIN)/python -m pip install -q -r requirements.txt -c constraints.txt 2>&1 | $(QUIET_PIP)
	$(BIN)/python -m pip install -q --no-deps -e . 2>&1 | $(QUIET_PIP)
	@touch $(STAMP)

system-packages:
	@bash tools/system_packages.sh $(SYSTEM_PACKAGES)

setup: $(STAMP) system-packages

# Each check's time goes to $CI_TIMES when it is set (tools/timed.sh; .ci/run prints them).
TIMED := bash tools/timed.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/zizmor --offline --strict-collection --no-progress .github/workflows/

# Two processes (pytest-xdist), one thread each, each notebook whole in one of them: about
# a fifth faster than one process on two threads (333 s against 421 s on the 2-core
# machine). The stored outputs were written on two threads; `make colab-check` and this
# run both check that one thread changes none of them.
# The tests marked slow (pyproject.toml: the benchmarks' quick runs, chapter 8's study in
# quick mode among them, a short run on the real data, torchrun) run in `make slow-tests`,
# part of `make test-elsewhere`, which keeps `make test` within 6 minutes.
pytest: setup
	OMP_NUM_THREADS=1 $(TIMED) pytest $(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow"

# SCREENSHOTS=1 saves a screenshot of every page in _build/screenshots (for a person to look
# at; `make book` does, and so does CI on GitHub, which uploads them); `make test` saves none,
# which halves the browser check's time.
SCREENSHOTS ?=
book-only: setup
	$(TIMED) book-build $(BIN)/jupyter-book build . --all -W --keep-going
	$(TIMED) book-check $(BIN)/python tools/check_built_book.py _build/html \
	  $(if $(SCREENSHOTS),--screenshots _build/screenshots)

book: SCREENSHOTS = 1
book: book-only
	@echo "Open file://$(CURDIR)/_build/html/index.html"

test: lint pytest book-only
	@echo "make test: all checks passed"

# The book where its readers run it, beyond this machine's numbers (slower; .ci/run runs it
# after `make test`): every notebook as Colab meets it and under a foreign CPU's floating
# point, in one run (colab-check; foreign-cpu alone is the quicker look at the second), and
# the unit tests under the oldest torch the metadata allows.
test-elsewhere: slow-tests colab-check old-torch
	@echo "make test-elsewhere: all checks passed"

# Two processes, the tests dealt out one by one: the study's quick test (about 2 minutes)
# runs beside the others.
slow-tests: setup
	OMP_NUM_THREADS=1 $(TIMED) slow-tests $(BIN)/python -m pytest -p no:nbval -o addopts= \
	  -n 2 --dist load -m slow tests

# Strict nbval on every notebook with another CPU's floating point: MKL's generic code path
# (MKL_CBWR=COMPATIBLE), one thread per kernel instead of all cores, and PyTorch's AVX2
# kernels in place of this CPU's best (FOREIGN_CPU=default: no vector kernels at all).
# The stored outputs were written with this machine's own numbers; they must not change.
FOREIGN_CPU ?= avx2
foreign-cpu: setup
	MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=$(FOREIGN_CPU) \
	  $(BIN)/python -m pytest book -p no:cacheprovider -n 2 --dist loadfile -q

# Every notebook as Colab meets it (alone in an empty folder, the wheel installed by its first
# cell), with the foreign CPU above, its stored outputs compared strictly: what foreign-cpu
# checks, and more. FOREIGN_CPU=native for this CPU's own kernels.
colab-check: setup
	$(TIMED) colab-check $(BIN)/python tools/colab_check.py --cpu $(FOREIGN_CPU) \
	  $(if $(NB),$(NB),$(NOTEBOOKS))

old-torch: setup
	$(TIMED) old-torch $(BIN)/python tools/old_torch.py

notebooks: setup
	$(BIN)/python tools/execute_notebooks.py $(if $(NB),$(NB),$(NOTEBOOKS))

colab-cells: setup
	$(BIN)/python tools/colab_cell.py --write $(NOTEBOOKS)

bench: setup
	for script in benchmarks/[!_]*.py; do echo "== $$script"; $(BIN)/python "$$script"; done

# Rewrite constraints.txt from what .venv holds (after adding or upgrading a dependency).
lock: setup
	{ sed -n '/^# /p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | grep -v '^-e'; } > constraints.txt.tmp
	mv constraints.txt.tmp constraints.txt

clean:
	rm -rf _build .pytest_cache .ruff_cache
