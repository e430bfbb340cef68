# The two commands a newcomer needs: `make serve` and `make test` (and `make bench` for the
# bench suite). Each bootstraps .venv from nothing but Python 3.11+ and make, installing exactly
# the versions (and file hashes) in requirements/*.lock.txt, which CI tested. `make lock`
# regenerates them from pyproject.toml after a dependency changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
LOCK := requirements/runtime.lock.txt
DEV_LOCK := requirements/dev.lock.txt
BENCH_STAMP := $(VENV)/.installed-bench
BENCH_LOCK := requirements/bench.lock.txt
BENCH_ARGS ?= suite
PIP_TOOLS := pip-tools==7.6.2
COMPILE := .venv-lock/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links --no-emit-trusted-host --resolver=backtracking

.PHONY: install serve test lint fmt typecheck unit fuzz migrate bench lock clean

# `make` alone: the runtime and dev dependencies, nothing run.
install: $(DEV_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(LOCK) pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

$(DEV_STAMP): $(DEV_LOCK) $(STAMP)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(DEV_LOCK)
	touch $@

# The `bench` extra (matplotlib, for the plots) next to the runtime, keeping the editable
# install (`pip install '.[bench]'` would replace it with a copy of the tree).
$(BENCH_STAMP): $(BENCH_LOCK) $(STAMP)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(BENCH_LOCK)
	touch $@

serve: $(STAMP)
	$(BIN)/gateway migrate
	$(BIN)/gateway serve

migrate: $(STAMP)
	$(BIN)/gateway migrate

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

fmt: $(DEV_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

unit: $(DEV_STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck unit

# Schemathesis against /openapi.json, longer than the bounded run in `make test`
# (tests/gateway/fuzz_rig.py). FUZZ_EXAMPLES per operation; with GATEWAY_TEST_DATABASE_URL
# set, once more on PostgreSQL.
FUZZ_EXAMPLES ?= 500
fuzz: $(DEV_STAMP)
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/gateway/test_openapi_fuzz.py -s $(PYTEST_ARGS)

# `gateway bench $(BENCH_ARGS)`: the standard suite by default (about 3 minutes; bench/README.md);
# e.g. make bench BENCH_ARGS="suite --duration 5 --out bench/out", or "files --mb 100".
bench: $(BENCH_STAMP)
	$(BIN)/gateway bench $(BENCH_ARGS)

# Needs the package registry; commit the three files with the pyproject.toml change. The bench
# lock is constrained to the dev lock's versions: both are installed into the same .venv.
lock:
	test -x .venv-lock/bin/pip-compile || \
		($(PYTHON) -m venv .venv-lock && .venv-lock/bin/python -m pip install --quiet $(PIP_TOOLS))
	$(COMPILE) -o $(LOCK) pyproject.toml requirements/build.in
	$(COMPILE) --extra dev -o $(DEV_LOCK) pyproject.toml requirements/build.in
	$(COMPILE) --extra bench -c $(DEV_LOCK) -o $(BENCH_LOCK) pyproject.toml requirements/build.in

clean:
	rm -rf $(VENV) .venv-lock var .mypy_cache .pytest_cache .ruff_cache
