# a2a-bridge: every target creates .venv and installs the project when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help run test bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP) ## serve test-runner, code-reviewer and deployer on 127.0.0.1:8000 (SQLite store ./a2a-bridge.db)
	$(BIN)/a2a-bridge serve $(ARGS)

test: $(STAMP) ## run the whole test suite
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP) ## print req/s of a 304 Task Status poll against GetTask on the same task (BENCH_ARGS=--help)
	$(BIN)/python -m bench.status_poll $(BENCH_ARGS)

clean: ## remove the virtualenv, caches and the default database
	rm -rf $(VENV) build .pytest_cache a2a-bridge.db *.egg-info
