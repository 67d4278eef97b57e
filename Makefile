# Two commands set everything up on a fresh machine:
#   make run   -> .venv, install remprop, draw the 60-layer BERT trainability diagram
#   make test  -> .venv, install remprop with the test, validation, distributed and notebooks
#                 extras, run the suite (notebooks included)
PYTHON ?= python3.11
VENV   ?= .venv
PIP    := $(VENV)/bin/python -m pip
# torch: the CPU build that lies on this machine's disk; never a multi-GB CUDA build.
TORCH_SPEC  ?= torch==2.13.0+cpu
TORCH_LINKS ?= /opt/wheels
OUT ?= remprop-out

.PHONY: run test venv install install-test bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-run: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q --find-links $(TORCH_LINKS) "$(TORCH_SPEC)"
	$(PIP) install -q --find-links $(TORCH_LINKS) -e ".[test,validation,distributed,notebooks]"
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed-run
install-test: $(VENV)/.installed-test

run: install
	$(VENV)/bin/remprop diagram --out $(OUT)

test: install-test
	$(VENV)/bin/python -m pytest tests

bench: install
	$(VENV)/bin/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info $(OUT)
