# make course: set up .venv, run every chapter in build/, save figures, print a summary table.
# make test:   set up .venv, check nmt_lib/ against the notebooks, unit tests, nbval (quick mode).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NBVAL := --nbval-lax --nbval-current-env --nbval-sanitize-with tools/nbval_sanitize.cfg

.PHONY: setup course test unit nbval lab export notebooks clean

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c 'import sys; v = sys.version_info[:2]; v == (3, 11) or print(f"warning: the course is pinned for Python 3.11, .venv has {v[0]}.{v[1]}")'
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install --no-deps -e .
	@touch $@

setup: $(STAMP)

course: $(STAMP)
	$(BIN)/python tools/run_course.py

test: $(STAMP)
	$(BIN)/python tools/export_lib.py --check
	NMT_QUICK=1 $(BIN)/python -m pytest tests notebooks $(NBVAL)

unit: $(STAMP)
	$(BIN)/python -m pytest tests

nbval: $(STAMP)
	NMT_QUICK=1 $(BIN)/python -m pytest notebooks $(NBVAL)

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

export:
	python3 tools/export_lib.py

# For maintainers: re-execute the committed notebooks in place, in learner mode, before committing.
notebooks: $(STAMP)
	$(BIN)/python tools/run_course.py --inplace

clean:
	rm -rf build
