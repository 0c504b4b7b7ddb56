# Two commands matter: `make demo` (the main job) and `make test` (the full suite).
# Each builds its own virtualenv in .venv from a fresh clone with only python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
DEV := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

# The demo needs the package with its langchain extra (create_agent); the test suite also needs the dev and postgres extras.
$(BASE): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[langchain]"
	touch $(BASE)

$(DEV): $(BASE)
	$(BIN)/python -m pip install -q -e '.[dev,postgres]'
	touch $(DEV)

demo: $(BASE)
	$(BIN)/spanpoint demo

test: $(DEV)
	$(BIN)/ruff check src tests examples bench
	bash scripts/test.sh

lint: $(DEV)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/vulture

bench: $(DEV)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .spanpoint .pytest_cache
