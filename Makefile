# Set-up is part of every target: a fresh machine needs only `make run` or `make test`.
# `make run` installs the broker alone; `make test` adds the test tools, the Kafka clients the
# tests talk to, and Spark (the `test` and `spark` extras in pyproject.toml).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-unit bench-cli system-deps clean

# uv (from PyPI) resolves and installs several times faster than pip.
$(UV):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv

$(RUN_STAMP): pyproject.toml | $(UV)
	$(UV) pip install -q -p $(PY) -e .
	touch $@

# PyPI has pyspark as a source distribution only: uv builds it at every install and keeps each
# 1.4 GiB build in its cache (about forty had filled 57 GiB of a disk); the venv keeps its own copy.
$(TEST_STAMP): pyproject.toml | $(UV)
	$(UV) pip install -q -p $(PY) -e '.[spark,test]'
	$(UV) cache clean -q pyspark
	touch $@

# kcat and PostgreSQL come from Debian; Spark needs a Java runtime (17 is on the machines we target);
# the console's browser test drives Debian's chromium (through Playwright).
system-deps:
	@command -v kcat >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat >/dev/null; }
	@command -v java >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@# PostgreSQL metadata tests start their own server (initdb + pg_ctl, as the postgres user).
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql >/dev/null; }

run: $(RUN_STAMP)
	$(VENV)/bin/diskless serve

# Two workers, a test file each at a time (module fixtures such as a shared broker stay in one
# process); the tests marked `alone` measure start-up times and run after, by themselves, from
# only the files that have them (collecting every test file again takes half a minute).
#
# The tests start hundreds of Python processes (brokers, commands, Spark's workers): each would
# compile every module it imports from source again where PYTHONDONTWRITEBYTECODE is set, and
# pytest would rewrite every test module again in each worker. Bytecode is cached for this run
# (a broker starts in 1 s instead of 2, collection takes 4 s instead of 22).
test: $(TEST_STAMP) system-deps
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not alone" --durations=30
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -p no:cacheprovider -m alone --durations=5 $$(grep -rl --include='test_*.py' 'mark\.alone' tests)

test-unit: $(TEST_STAMP)
	$(PY) -m pytest -q tests/unit tests/property

# `diskless produce` / `consume` beside kcat.
bench-cli: $(RUN_STAMP) system-deps
	$(PY) bench/cli.py

clean:
	rm -rf $(VENV) diskless-data
