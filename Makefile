# Two commands set everything up on a fresh machine:
#   make run   -> .venv, install remprop, draw the 60-layer BERT trainability diagram
#   make test  -> .venv, install remprop with the test, validation, distributed, notebooks
#                 and docs extras, run the suite (notebooks and the docs build included)
#   make docs  -> one site: getting started, the markdown docs and the API reference,
#                 into docs/_build/html
#
# Python: any of 3.10-3.13 (`make PYTHON=python3.12 test` picks one). By default the one the
# local torch wheel is built for (below), else the newest of python3.13 ... python3.10 that
# runs, else python3. Without make: `pip install .` (README, "Quick start").
VENV   ?= .venv
PIP    := $(VENV)/bin/python -m pip
# torch: the CPU build from the local wheel folder where that folder holds it for the venv's
# Python (never a multi-GB CUDA build there); on a machine without such a folder, the package
# registry's torch (TORCH_INDEX=URL: from another index, e.g. one of CPU builds). Where the
# folder holds the wheel only for another Python, `make install-test` stops and says so
# rather than pull the registry's CUDA build: name that Python, or TORCH_LINKS= to take the
# registry's torch anyway.
TORCH_SPEC  ?= torch==2.13.0+cpu
TORCH_LINKS ?= /opt/wheels
TORCH_INDEX ?=
TORCH_WHEEL := $(subst ==,-,$(TORCH_SPEC))
PYTHON_VERSIONS := 3.13 3.12 3.11 3.10
# pythonX.Y of the local torch wheel (cpXY in its name), if the folder holds one
TORCH_PYTHON := $(shell ls $(TORCH_LINKS)/$(TORCH_WHEEL)-cp3*.whl 2>/dev/null | \
                  sed -n 's/.*-cp3\([0-9][0-9]*\)-.*/python3.\1/p' | head -n 1)
# the first candidate that runs (a pyenv shim of an inactive version does not) and is >= 3.10;
# looked for only where a recipe needs it (creating the venv), once: starting each candidate
# took about a second of every make call, twice in `make run` (which calls make again)
ifeq ($(origin PYTHON),undefined)
PYTHON = $(eval PYTHON := $(firstword $(foreach python,$(TORCH_PYTHON) $(addprefix python,$(PYTHON_VERSIONS)) python3,\
            $(shell $(python) -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' \
                    >/dev/null 2>&1 && echo $(python)))))$(PYTHON)
endif
OUT ?= remprop-diagram

.PHONY: run test venv install install-test docs bench clean

# The venv gets pip from the interpreter's own pip (pip >= 22.3 installs into another
# environment with --python) where it can, in about a second, else from ensurepip (about 8 s).
# `make install` installs without byte-compiling every module (--no-compile): byte-compiling
# all of scipy, matplotlib, sympy and numba took half a minute of a fresh `make run`; the first
# command writes the bytecode of the modules it imports (numba's cache of the engine is the same
# whether remprop is loaded from its sources or its bytecode: tests/test_cold_start.py).
$(VENV)/bin/python:
	@test -n "$(PYTHON)" || { echo "no Python 3.10-3.13 found (python3.13 ... python3.10, python3): make PYTHON=/path/to/python"; exit 1; }
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(VENV)/bin/python install -q --no-compile pip >/dev/null 2>&1 || \
	    $(VENV)/bin/python -m ensurepip >/dev/null

# After installing, `remprop precompile` compiles the theory's engine (the three numba sweeps that
# run every architecture, src/remprop/cli/commands/precompile.py) once, in a detached process
# started once `make run` has drawn its diagram: later commands load it from disk (the user cache
# folder, $REMPROP_CACHE_DIR or ~/.cache/remprop: src/remprop/cache.py). numba's cache is keyed on
# the sources, so it runs again when theory/ changes.
THEORY_SOURCES := $(shell find theory -name '*.py' 2>/dev/null)

$(VENV)/.installed-run: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q --no-compile -e .
	touch $@

$(VENV)/.precompiled: $(THEORY_SOURCES) | $(VENV)/.installed-run
	$(VENV)/bin/remprop precompile --background --jobs 1
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	@tag=cp$$($(VENV)/bin/python -c 'import sys; print("%d%d" % sys.version_info[:2])'); \
	if ls $(TORCH_LINKS)/$(TORCH_WHEEL)-$$tag-*.whl >/dev/null 2>&1; then \
	    echo "torch: $(TORCH_SPEC) from $(TORCH_LINKS) ($$tag)"; \
	    $(PIP) install -q --find-links $(TORCH_LINKS) "$(TORCH_SPEC)"; \
	elif ls $(TORCH_LINKS)/$(TORCH_WHEEL)-*.whl >/dev/null 2>&1; then \
	    echo "torch: $(TORCH_LINKS) holds $(TORCH_WHEEL) only for $(TORCH_PYTHON), not this venv's $$tag;" \
	         "the registry's torch would be a CUDA build. Use make PYTHON=$(TORCH_PYTHON) (after make clean)," \
	         "or TORCH_LINKS= to install the registry's torch anyway"; \
	    exit 1; \
	elif [ -n "$(TORCH_INDEX)" ]; then \
	    echo "torch: from $(TORCH_INDEX)"; \
	    $(PIP) install -q --index-url "$(TORCH_INDEX)" torch; \
	else \
	    echo "torch: no $(TORCH_WHEEL) wheel in $(TORCH_LINKS); torch from the package registry"; \
	    $(PIP) install -q torch; \
	fi
	$(PIP) install -q -e ".[test,validation,distributed,notebooks,docs]"
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed-run $(VENV)/.precompiled
install-test: $(VENV)/.installed-test

run: $(VENV)/.installed-run
	$(VENV)/bin/remprop diagram --out $(OUT)
	@$(MAKE) --no-print-directory $(VENV)/.precompiled

# The suite runs on every core (at most 4 worker processes). A test file goes to one worker
# (its module fixtures are built once), except the tests tests/conftest.py names INDEPENDENT;
# the files holding slow tests start first. On a fresh clone much of its time is numba
# compiling the kernels' specialisations, which the workers share through the disk cache.
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

# Before the tests, the engine (`remprop precompile`, in the foreground): compiled once, and loaded
# from disk by every worker instead of compiled by each.
$(VENV)/.precompiled-test: $(THEORY_SOURCES) | $(VENV)/.installed-test
	$(VENV)/bin/remprop precompile
	touch $@

test: install-test $(VENV)/.precompiled-test
	$(VENV)/bin/python -m pytest tests $(PYTEST_WORKERS)

# The documentation site (docs/conf.py): docs/getting_started.md, the markdown docs and the
# API reference from the docstrings (docs/api), into docs/_build/html. Nitpicky, warnings are
# errors, so a broken cross-reference or a stale parameter list fails (tests/test_docs_site.py
# and tests/test_api_docs.py too).
docs: install-test
	$(VENV)/bin/python -m sphinx -n -W --keep-going -b html docs docs/_build/html

bench: install
	$(VENV)/bin/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info $(OUT)
