# The two commands a newcomer needs (README): `make demo` and `make test`.
# Both run tools/setup.sh first: it installs the missing system packages and makes the project
# venv `.venv` from the machine's python3 (override with PYTHON=/path/to/python3).
VENV ?= .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
VPY := $(CURDIR)/$(VENV)/bin/python

.PHONY: setup demo test bench
setup:
	VENV=$(VENV) bash tools/setup.sh

demo: setup
	$(VPY) -m ldpfleet.cli demo

# Most tests wait on brokers, interpreters and databases rather than compute, so 4 workers
# (pytest-xdist) also pay on 2 cores: the suite takes about half the time it takes serially.
TEST_WORKERS ?= 4
test: setup
	$(VPY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS)

bench: setup
	$(VPY) tools/bench.py
