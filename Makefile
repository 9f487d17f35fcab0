# fenceq: `make test` and `make demo` work on a fresh clone (they install first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export FENCEQ_TEST_PG_PORT ?= 54329

.PHONY: install test bench sql demo docs schema pg-start pg-stop clean fuzz

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

pg-start:
	@scripts/pg-test-server start >/dev/null

pg-stop:
	@scripts/pg-test-server stop

test: install pg-start
	$(BIN)/pytest -q

BENCH_PG_URL := postgresql://postgres@127.0.0.1:54339/postgres
BENCH_ARGS ?=

# The comparison system of issue 8, in the bench environment only.
$(VENV)/.bench-installed: $(VENV)/.installed
	$(BIN)/pip install --quiet 'pgqueuer==1.6.*' asyncpg
	touch $@

bench: install $(VENV)/.bench-installed
	FENCEQ_PG_DURABLE=1 FENCEQ_PG_STAT_STATEMENTS=1 FENCEQ_TEST_PG_PORT=54339 scripts/pg-test-server start >/dev/null
	$(BIN)/python -m bench --url $(BENCH_PG_URL) $(BENCH_ARGS)

sql: install
	$(BIN)/fenceq sql --backend postgres > build-fenceq-postgres.sql
	@echo "wrote build-fenceq-postgres.sql"

demo: install
	$(BIN)/fenceq demo

clean:
	rm -rf $(VENV) build-fenceq-*.sql

docs: install pg-start
	$(BIN)/python scripts/gen-docs
	$(BIN)/python scripts/gen-sql-reference
	$(BIN)/python scripts/gen-sqlite

schema: install pg-start
	$(BIN)/python scripts/dump-schema

# Issue 13 §4: every public function on both engines, >= FUZZ_CALLS generated
# calls each, on two worker processes; writes tests/fuzz/fuzz-counts.json and
# the generated section of docs/fuzzing.md.
FUZZ_CALLS ?= 10000
fuzz: install pg-start
	$(BIN)/python tests/fuzz/fuzz_run.py --url postgresql://postgres@127.0.0.1:$(FENCEQ_TEST_PG_PORT)/postgres --calls $(FUZZ_CALLS)
