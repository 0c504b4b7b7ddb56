# Two commands matter: `make demo` (the main job) and `make test` (the full suite).
# Each builds its own virtualenv in .venv from a fresh clone with only python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,postgres]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/spanpoint demo

test: $(STAMP)
	$(BIN)/ruff check src tests examples bench
	bash scripts/test.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .spanpoint .pytest_cache
