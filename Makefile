# The two commands of the README: `make serve` and `make test`.
# `make serve` installs only what serving needs (the package and its dependencies);
# `make test` (and `make install`, check, bench) add the dev and spark extras.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SERVE_STAMP := $(VENV)/.installed-serve
DEV_STAMP := $(VENV)/.installed-dev
# `make serve PORT=8081 DATA=./other` serves another port or data directory.
HOST ?= 127.0.0.1
PORT ?= 8080
DATA ?= ./data

.PHONY: install install-serve serve test test-pg check format bench bench-peers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(SERVE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(SERVE_STAMP)

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(DEV_STAMP) $(SERVE_STAMP)

install-serve: $(SERVE_STAMP)

install: $(DEV_STAMP)

serve: install-serve
	$(BIN)/txnstream serve --data $(DATA) --host $(HOST) --port $(PORT)

check: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: install
	$(MAKE) check
	$(BIN)/python -m pytest

# `make test` with the long engine tests on PostgreSQL too (make test runs every engine
# suite on both stores, those few on SQLite alone; see tests/conftest.py)
test-pg: install
	$(MAKE) check
	TXNSTREAM_ALL_STORES=1 $(BIN)/python -m pytest

bench: install
	$(BIN)/python benchmarks/run.py $(if $(QUICK),--quick,)

# txnstream beside raw sqlite3, aiosqlite, PostgreSQL and Redis (those two when their
# servers are installed: apt-get install postgresql redis-server); CHART=path.png draws it
bench-peers: install
	$(BIN)/python -m pip install --quiet -e '.[peers]'
	$(BIN)/python benchmarks/peers.py $(if $(QUICK),--quick,) $(if $(CHART),--chart $(CHART),)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache bench-results.json
