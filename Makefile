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

test: setup
	$(VPY) -m pytest -q -p no:cacheprovider

bench: setup
	$(VPY) tools/bench.py
