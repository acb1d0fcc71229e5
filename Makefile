# The two commands: `make run` (the product) and `make test` (ruff, the import contracts of
# docs/architecture.md, mypy strict on all of the project's code, then pytest). mypy reads
# the settings in development shape (DEBUG=1), as the tests do.
# Both build .venv from uv.lock first; nothing else needs installing by hand.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
STAMP := $(VENV)/.synced-$(shell cat uv.lock pyproject.toml | cksum | cut -d' ' -f1)

export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: install run test test-fast lint fmt bench lock

install: $(STAMP)

$(STAMP): uv.lock pyproject.toml
	@test -x $(BIN)/uv || { $(PYTHON) -m venv $(VENV) && $(BIN)/pip install -q uv==$(UV_VERSION); }
	$(BIN)/uv sync --frozen --extra semantic --python $(BIN)/python
	@rm -f $(VENV)/.synced-* && touch $@

# Published MCP servers the tests connect to, pinned by their lock file (Node from the
# machine); without npm the test that needs them skips, or fails under CI.
NPM_SERVERS := tests/mcp/npm/node_modules/.package-lock.json

$(NPM_SERVERS): tests/mcp/npm/package-lock.json
	@if command -v npm >/dev/null; then \
	  npm ci --prefix tests/mcp/npm --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: tests of published MCP servers will skip"; fi

run: $(STAMP)
	@PATH="$(CURDIR)/$(BIN):$$PATH" ./bin/run

# Tests run on PYTEST_WORKERS pytest-xdist workers (0: in this process), each with its own
# test database and Redis databases (tests/workers.py). Much of a test's time is waiting on
# another process, so two workers on two cores nearly halve the run (README, "Tests").
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal

test: lint $(NPM_SERVERS)
	$(PYTEST) $(PYTEST_ARGS)

# The edit-test loop: the linters, then every test that starts no process of its own (no
# server, worker, browser, sandbox or MCP server; tests marked `processes` are left out).
test-fast: lint
	$(PYTEST) -m "not processes" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	DEBUG=1 $(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	@set -e; for script in bench/[!_]*.py; do $(BIN)/python "$$script"; done

# Regenerate uv.lock after editing pyproject.toml's dependencies.
lock: $(STAMP)
	$(BIN)/uv lock
