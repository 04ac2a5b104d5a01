# Set-up is part of every target: a fresh machine needs only `make run` or `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-unit bench system-deps clean

# uv (from PyPI) resolves and installs several times faster than pip.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q -p $(PY) -e '.[spark,test]'
	touch $(STAMP)

# kcat comes from Debian; Spark needs a Java runtime (17 is on the machines we target).
system-deps:
	@command -v kcat >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat >/dev/null; }
	@command -v java >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }

run: $(STAMP)
	$(VENV)/bin/diskless serve

test: $(STAMP) system-deps
	$(PY) -m pytest -q -p no:cacheprovider

test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit tests/property

clean:
	rm -rf $(VENV) diskless-data
