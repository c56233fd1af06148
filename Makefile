# The two commands a newcomer needs (README): `make demo` and `make test`.
# Both run tools/setup.sh first: it installs the missing system packages and makes the project
# venv `.venv` from the machine's python3 (override with PYTHON=/path/to/python3).
VENV ?= .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
VPY := $(CURDIR)/$(VENV)/bin/python

.PHONY: setup demo test test-unit bench
setup:
	VENV=$(VENV) bash tools/setup.sh

demo: setup
	$(VPY) -m ldpfleet.cli demo

# Most tests wait on brokers, interpreters, databases and round timers rather than compute, so
# 6 workers (pytest-xdist) pay on 2 cores: measured on this 2-core machine, quiet, 2,295 tests:
# 692 s with -n 4, 596 s with -n 6 (user CPU 14.5 and 15.4 min: the cores were not saturated).
TEST_WORKERS ?= 6
test: setup
	$(VPY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS)

# The fast loop while changing a mechanism: tests/unit only (in process: no broker, interpreter,
# database or compiler), on 2 xdist workers (the tests are compute-bound, so one per core).
# It skips setup's package checks when the venv is there (run `make setup` after changing C);
# ARGS passes more pytest options (ARGS="-k olh", ARGS="--durations=20").
UNIT_WORKERS ?= 2
test-unit: $(VPY)
	$(VPY) -m pytest -q -p no:cacheprovider -n $(UNIT_WORKERS) tests/unit $(ARGS)

$(VPY):
	VENV=$(VENV) bash tools/setup.sh

bench: setup
	$(VPY) tools/bench.py
