# Two commands set everything up on a fresh machine:
#   make run   -> .venv, install remprop, draw the 60-layer BERT trainability diagram
#   make test  -> .venv, install remprop with the test, validation, distributed, notebooks
#                 and docs extras, run the suite (notebooks and the API reference build included)
#   make docs  -> the API reference from the docstrings, into docs/api/_build/html
PYTHON ?= python3.11
VENV   ?= .venv
PIP    := $(VENV)/bin/python -m pip
# torch: the CPU build from the local wheel folder where that folder holds it (never a
# multi-GB CUDA build there); on a machine without it, the package registry's torch.
TORCH_SPEC  ?= torch==2.13.0+cpu
TORCH_LINKS ?= /opt/wheels
TORCH_WHEEL := $(subst ==,-,$(TORCH_SPEC))
OUT ?= remprop-diagram

.PHONY: run test venv install install-test docs bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-run: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	@if ls $(TORCH_LINKS)/$(TORCH_WHEEL)-*.whl >/dev/null 2>&1; then \
	    echo "torch: $(TORCH_SPEC) from $(TORCH_LINKS)"; \
	    $(PIP) install -q --find-links $(TORCH_LINKS) "$(TORCH_SPEC)"; \
	else \
	    echo "torch: no $(TORCH_WHEEL) wheel in $(TORCH_LINKS); torch from the package registry"; \
	    $(PIP) install -q torch; \
	fi
	$(PIP) install -q -e ".[test,validation,distributed,notebooks,docs]"
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed-run
install-test: $(VENV)/.installed-test

run: install
	$(VENV)/bin/remprop diagram --out $(OUT)

# The suite runs on every core (at most 4 worker processes; one test file per worker, so
# a file's module fixtures are built once): on a fresh clone most of its time is numba
# compiling the kernels' specialisations, which the workers share through the disk cache.
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadfile

test: install-test
	$(VENV)/bin/python -m pytest tests $(PYTEST_WORKERS)

# The API reference from the docstrings (docs/api): nitpicky, warnings are errors, so a
# broken cross-reference or a stale parameter list fails (tests/test_api_docs.py too).
docs: install-test
	$(VENV)/bin/python -m sphinx -n -W --keep-going -b html docs/api docs/api/_build/html

bench: install
	$(VENV)/bin/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info $(OUT)
