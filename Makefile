# a2a-bridge: every target creates .venv and installs the project when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The compiled install (test, bench, tck, chaos) and the plain Python one `make run` makes when the compiled one is
# not current: serving on a fresh clone without waiting for mypyc (docs/operations.md, "The first make run").
STAMP := $(VENV)/.installed
PLAIN := $(VENV)/.installed-plain
# The modules setup.py compiles: a change to one reinstalls, so that its extension is never older than its source.
COMPILED := $(shell sed -n '/^COMPILED = \[/,/^\]/p' setup.py | grep -o '"[a-z_/]*"' | tr -d '"')

.PHONY: help run test tck bench bench-quick bench-setup chaos clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml setup.py $(COMPILED:%=a2a_bridge/%.py)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Plain Python: no extension is left to shadow its source, and the compiled stamp goes with them.
$(PLAIN): pyproject.toml setup.py $(COMPILED:%=a2a_bridge/%.py)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	rm -f $(STAMP); find a2a_bridge -name '*.so' -delete
	A2A_BRIDGE_COMPILE=0 $(BIN)/pip install --quiet -e .
	touch $(PLAIN)

run: ## serve test-runner, code-reviewer and deployer on 127.0.0.1:8000 (SQLite store ./a2a-bridge.db; ARGS="--port 8001 ...": serve's options); the compiled build once make test has made it, else plain Python
	@$(MAKE) --no-print-directory --question $(STAMP) || $(MAKE) --no-print-directory $(PLAIN)
	$(BIN)/a2a-bridge serve $(ARGS)

test: $(STAMP) ## run the test suite (~15 min; PYTEST_ARGS="-x -k name": pytest's options; skips what needs ../shared, PostgreSQL, Node or Chromium: `bash .ci/run` runs everything)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

tck: $(STAMP) ## the A2A TCK (../shared/a2a-tck, copied to .tck/ with its own venv) against the conformance agent on every binding (~3 min; TCK_ARGS="--source DIR": tck_run.run's options)
	$(BIN)/python -m tck_run.run $(TCK_ARGS)

# @a2a-js/sdk where npm is installed; wrk (the load generator of the timed runs) where apt is and wrk is not.
bench-setup: $(STAMP)
	@if command -v npm >/dev/null && [ ! -d interop/js/node_modules/@a2a-js/sdk ]; then \
		npm ci --prefix interop/js --no-audit --no-fund --loglevel=error; fi
	@if ! command -v wrk >/dev/null && command -v apt-get >/dev/null; then \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y wrk >/dev/null \
		|| echo "wrk not installed: the timed runs use the Python client (bench/load.py)"; fi

bench: bench-setup ## a2a-bridge against the stock SDK, @a2a-js/sdk and a bare echo, and on PostgreSQL where A2A_BRIDGE_PG_URL names one or Debian's package is installed; writes docs/PERFORMANCE.md (~14 min, about 20 with PostgreSQL; BENCH_ARGS: bench.run's options, e.g. --only reads)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

bench-quick: bench-setup ## one short round of `make bench` with smaller stores, printed only (~2-3 min; BENCH_ARGS too)
	$(BIN)/python -m bench.run --quick --no-write $(BENCH_ARGS)

chaos: $(STAMP) ## Jepsen-style nemesis run: 3 replicas on a PostgreSQL of their own under kills, pauses, restarts and clock skew (~4 min; docs/chaos.md; CHAOS_ARGS="--seed 4242 --duration 120": chaos.run's options)
	$(BIN)/python -m chaos.run $(CHAOS_ARGS)

clean: ## remove the virtualenv, the compiled modules, caches and the default database
	find a2a_bridge -name '*.so' -delete; rm -rf $(VENV) build .pytest_cache a2a-bridge.db *.egg-info .tck
