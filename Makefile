# fenceq: `make test` and `make demo` work on a fresh clone (they install first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export FENCEQ_TEST_PG_PORT ?= 54329

.PHONY: test-django6 install test test-isolation test-system bench profile sql demo docs schema privileges pg-start pg-stop clean test-pg16 test-pgbouncer fuzz model

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
	$(BIN)/pytest -q -m "not system"
	$(MAKE) test-isolation

# The whole-program runs (tests/conftest.py's SYSTEM_RUNS: the demo, the
# dashboard CLI, the quick start page, the bench smoke runs, each module
# imported alone) and the short profiles of fuzz and the model, left out of
# `make test` to keep it under 15 minutes.
test-system: install pg-start
	$(BIN)/pytest -q -m system

# Issue 19 §1: every race docs/guarantees.md names, pinned with PostgreSQL's
# own isolation tester against the test server (docs/testing.md).
test-isolation: install pg-start
	tests/isolation/run

BENCH_PG_URL := postgresql://postgres@127.0.0.1:54339/postgres
BENCH_ARGS ?=

# The comparison system of issue 8, in the bench environment only.
$(VENV)/.bench-installed: $(VENV)/.installed
	$(BIN)/pip install --quiet 'pgqueuer==1.6.*' asyncpg
	touch $@

# Version 4 beside version 5 on the same server, after the main run (issue
# 18 §6): bench/runs/v4-v5.{json,md}. A --quick run leaves it out.
BENCH_V4V5_ARGS ?= --diag-jobs 3000 --diag-rounds 3 --drain-jobs 3000 --rounds 3 --later 100000 --upgrade-sizes 100000

bench: install $(VENV)/.bench-installed
	FENCEQ_PG_DURABLE=1 FENCEQ_PG_STAT_STATEMENTS=1 FENCEQ_TEST_PG_PORT=54339 scripts/pg-test-server start >/dev/null
	$(BIN)/python -m bench --url $(BENCH_PG_URL) $(BENCH_ARGS)
	$(if $(findstring --quick,$(BENCH_ARGS)),,$(BIN)/python -m bench.v4_v5 --url $(BENCH_PG_URL) $(BENCH_V4V5_ARGS))
	$(MAKE) bench-peers $(if $(findstring --quick,$(BENCH_ARGS)),BENCH_PEERS_ARGS="--jobs 2000 --rounds 1 --wake 200")
	$(BIN)/python -m bench.sqlite_worker $(if $(findstring --quick,$(BENCH_ARGS)),--jobs 2000 --rounds 1,--jobs 10000 --rounds 5)

# fenceq.Worker against the peers' own workers (issue 29 item 5):
# bench/runs/peers.{json,md}. bench/peers_install installs the peers it can
# (pgqueuer and procrastinate into .venv, oban into .venv-oban from a Python
# >= 3.12, graphile-worker, pg-boss and Node 22 into bench/peers_node with
# npm); one it cannot install or run is reported as not run, with the reason.
BENCH_PEERS_ARGS ?= --jobs 10000 --rounds 3 --processes 1,4
.PHONY: bench-peers
bench-peers: install
	FENCEQ_PG_DURABLE=1 FENCEQ_PG_STAT_STATEMENTS=1 FENCEQ_TEST_PG_PORT=54339 scripts/pg-test-server start >/dev/null
	VENV=$(VENV) bench/peers_install
	$(BIN)/python -m bench.peers --url $(BENCH_PG_URL) $(BENCH_PEERS_ARGS)

# What version 6's job history costs (issue 26): version 5, version 6 with
# history off and with it on, three databases on the bench server, rounds
# interleaved: bench/runs/history-cost.{json,md}. About 5 minutes; not part of
# `make bench`, which it would take past its budget.
BENCH_HISTORY_ARGS ?= --jobs 20000 --single-jobs 2000 --rounds 6
.PHONY: bench-history
bench-history: install
	FENCEQ_PG_DURABLE=1 FENCEQ_PG_STAT_STATEMENTS=1 FENCEQ_TEST_PG_PORT=54339 scripts/pg-test-server start >/dev/null
	$(BIN)/python -m bench.history_cost --url $(BENCH_PG_URL) $(BENCH_HISTORY_ARGS)

# What version 7's operator view costs at 1M jobs of history (issue 27):
# sample_activity, activity() and each search shape and bulk action on the
# bench server: bench/runs/activity-cost.{json,md}. About 4 minutes; not
# part of `make bench`.
BENCH_ACTIVITY_ARGS ?=
.PHONY: bench-activity
bench-activity: install
	FENCEQ_PG_DURABLE=1 FENCEQ_TEST_PG_PORT=54339 scripts/pg-test-server start >/dev/null
	$(BIN)/python -m bench.activity_cost --url $(BENCH_PG_URL) $(BENCH_ACTIVITY_ARGS)

# Server time line by line of PL/pgSQL (bench/plprofile.py), on its own
# server with plprofiler preloaded. Not part of make test or make bench.
PROFILE_ARGS ?=
profile: install
	@dpkg -s postgresql-15-plprofiler >/dev/null 2>&1 || { echo "make profile needs Debian's" \
	  "postgresql-15-plprofiler: apt-get install postgresql-15-plprofiler" >&2; exit 1; }
	FENCEQ_PG_DURABLE=1 FENCEQ_PG_PLPROFILER=1 FENCEQ_TEST_PG_PORT=54349 scripts/pg-test-server start >/dev/null
	$(BIN)/python -m bench.plprofile --url postgresql://postgres@127.0.0.1:54349/postgres $(PROFILE_ARGS)

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

# The golden list of privileges (tests/golden_privileges.json) and docs/dba.md's
# table made from it, from a fresh install: run on purpose when grants change.
privileges: install pg-start
	$(BIN)/python scripts/gen-privileges

# The PostgreSQL half of the suite on PostgreSQL 16, from the pgserver wheel
# (its pg_dump too). The wheel's build lacks auto_explain and ICU, and the
# committed schema dump is PostgreSQL 15's deparse: those tests stay on 15,
# and so does plpgsql_check (Debian's package is for the server of 15).
PG16_PORT ?= 54333
PG16_BINDIR = $(shell $(BIN)/python -c 'import importlib.util as u, os; \
	print(os.path.join(u.find_spec("pgserver").submodule_search_locations[0], "pginstall", "bin"))')

$(VENV)/.pg16-installed: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test,pg16]'
	touch $@

# The plan tests read EXPLAIN through auto_explain, which the wheel's build lacks.
test-pg16: install $(VENV)/.pg16-installed
	scripts/pg-test-server --bindir $(PG16_BINDIR) --port $(PG16_PORT) start >/dev/null
	PATH="$(PG16_BINDIR):$$PATH" FENCEQ_TEST_PG_PORT=$(PG16_PORT) $(BIN)/pytest -q -m pg_server \
		--ignore tests/test_pg_plans.py --ignore tests/test_pg_schema_dump.py --ignore tests/test_security_plpgsql_check.py \
		--deselect 'tests/test_pg_verify_tamper.py::test_each_check_refuses_its_tampering[deterministic_collations]' \
		--deselect 'tests/test_due_later.py::test_an_empty_claim_and_next_due_read_one_probe_past_jobs_due_later' \
		--deselect tests/test_pg_activity.py::test_sampling_and_reading_read_index_ranges_at_any_size \
		--deselect tests/test_pg_bulk.py::test_a_filter_reads_its_queues_index_not_the_history \
		--deselect tests/test_pg_search.py::test_each_range_reads_an_index_even_when_planned_on_empty_tables; \
		status=$$?; scripts/pg-test-server --bindir $(PG16_BINDIR) --port $(PG16_PORT) stop; exit $$status

# Django 6's own django.tasks (docs/integrations.md): Django 6 needs Python
# >= 3.12, and the main venv may be older (there, the tests run on the
# django-tasks package). A venv of its own from the first python3.12+ found
# (on PATH, or under pyenv's versions); none found: said, and skipped.
DJANGO6_VENV := .venv-django6
test-django6: pg-start
	@python=""; for c in python3.14 python3.13 python3.12 \
	    $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3; do \
	    if "$$c" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then python="$$c"; break; fi; \
	done; \
	if [ -z "$$python" ]; then echo "test-django6: no Python >= 3.12 here; skipped"; exit 0; fi; \
	[ -x $(DJANGO6_VENV)/bin/pytest ] || { "$$python" -m venv $(DJANGO6_VENV) && \
	    $(DJANGO6_VENV)/bin/pip install --quiet -e '.[test]' 'django>=6'; } && \
	$(DJANGO6_VENV)/bin/pytest -q -p no:cacheprovider tests/tasks/test_django_backend.py

# The conformance suite (the PostgreSQL half of the db fixture) with its
# clients going through PgBouncer in transaction mode, two server
# connections per database, in front of the PostgreSQL 15 test server.
PGBOUNCER_PORT ?= 54332

test-pgbouncer: install pg-start
	scripts/pgbouncer-test-server --port $(PGBOUNCER_PORT) --upstream-port $(FENCEQ_TEST_PG_PORT) --pool-size 2 start >/dev/null
	FENCEQ_TEST_PGBOUNCER_PORT=$(PGBOUNCER_PORT) $(BIN)/pytest -q -m pg_conformance; \
		status=$$?; scripts/pgbouncer-test-server --port $(PGBOUNCER_PORT) stop; exit $$status

# The multi-host fault run (issue 13 §3, docs/faults-multi-host.md): network
# namespaces, so root only; skipped with the reason where they cannot be made.
.PHONY: test-hosts
test-hosts: install
	FENCEQ_TEST_HOSTS=1 $(BIN)/pytest -q -s -rs -p no:cacheprovider tests/hosts

# Issue 20 (docs/dba.md, "Running with a standby"): a primary and a streaming
# standby of their own (scripts/pg-failover-cluster), the primary killed and
# the standby promoted under a drain; once with an asynchronous standby. Then
# a pg_auto_failover formation (scripts/pg-auto-failover-cluster, Debian's
# postgresql-15-auto-failover): pg_autoctl perform failover and a killed
# primary under a drain. Four ports from FAILOVER_PORT, three from
# AUTO_FAILOVER_PORT (by default the three after those).
.PHONY: test-failover
FAILOVER_PORT ?= 54406
AUTO_FAILOVER_PORT ?= $(shell expr $(FAILOVER_PORT) + 4)
test-failover: install
	FENCEQ_TEST_FAILOVER=1 FENCEQ_FAILOVER_PG_PORT=$(FAILOVER_PORT) FENCEQ_AUTO_FAILOVER_PG_PORT=$(AUTO_FAILOVER_PORT) \
		$(BIN)/pytest -q -s -rs -p no:cacheprovider tests/failover

# Issue 13 §4: every public function on both engines, >= FUZZ_CALLS generated
# calls each, on two worker processes; writes tests/fuzz/fuzz-counts.json and
# the generated section of docs/fuzzing.md. FUZZ_ENGINES and FUZZ_FUNCTIONS
# (comma lists) run a part; its counts are merged into those of earlier runs.
FUZZ_CALLS ?= 10000
FUZZ_ENGINES ?=
FUZZ_FUNCTIONS ?=
fuzz: install pg-start
	$(BIN)/python tests/fuzz/fuzz_run.py --url postgresql://postgres@127.0.0.1:$(FENCEQ_TEST_PG_PORT)/postgres --calls $(FUZZ_CALLS) \
		$(if $(FUZZ_ENGINES),--engines $(FUZZ_ENGINES)) $(if $(FUZZ_FUNCTIONS),--functions $(FUZZ_FUNCTIONS))

# Issue 19 §2 (docs/mutants.md): each mutant of tests/mutants/mutants.toml
# breaks one rule of the SQL; its killer tests must turn red. On demand, not
# in `make test` (which checks only that the list still applies).
# MUTANTS (a comma list of ids) runs a part.
MUTANTS ?=
.PHONY: mutants
mutants: install pg-start
	$(BIN)/python tests/mutants/run.py $(if $(MUTANTS),--only $(MUTANTS))

# Issue 19 §3: the model and both engines in lockstep (tests/model), the long
# profile; `make test-system` runs the short one (50 examples of 30 steps, the same
# every run). Random examples; MODEL_REPORT gets the outcome counts (JSON).
MODEL_EXAMPLES ?= 5000
MODEL_STEPS ?= 50
MODEL_SHRINK ?= 1
MODEL_REPORT ?= tests/model/model-report.json
model: install pg-start
	FENCEQ_MODEL_EXAMPLES=$(MODEL_EXAMPLES) FENCEQ_MODEL_STEPS=$(MODEL_STEPS) FENCEQ_MODEL_RANDOM=1 \
		FENCEQ_MODEL_SHRINK=$(MODEL_SHRINK) FENCEQ_MODEL_REPORT=$(MODEL_REPORT) \
		$(BIN)/pytest -q -p no:cacheprovider tests/model/test_model.py
