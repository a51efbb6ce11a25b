# The two commands of the README: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install serve test check format bench bench-peers clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

install: $(STAMP)

serve: install
	$(BIN)/txnstream serve --data ./data --host 127.0.0.1 --port 8080

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

bench: install
	$(BIN)/python benchmarks/run.py $(if $(QUICK),--quick,)

# txnstream beside raw sqlite3, aiosqlite, PostgreSQL and Redis (those two when their
# servers are installed: apt-get install postgresql redis-server); CHART=path.png draws it
bench-peers: install
	$(BIN)/python -m pip install --quiet -e '.[peers]'
	$(BIN)/python benchmarks/peers.py $(if $(QUICK),--quick,) $(if $(CHART),--chart $(CHART),)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache bench-results.json
