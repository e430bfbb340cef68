# The two commands a newcomer needs: `make serve` and `make test`.
# Both bootstrap .venv from nothing but Python 3.11+ and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: serve test lint fmt typecheck unit migrate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(DEV_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

serve: $(STAMP)
	$(BIN)/gateway migrate
	$(BIN)/gateway serve

migrate: $(STAMP)
	$(BIN)/gateway migrate

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(DEV_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

unit: $(DEV_STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck unit

clean:
	rm -rf $(VENV) var .mypy_cache .pytest_cache .ruff_cache
