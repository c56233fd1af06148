# The two commands a newcomer needs (README): `make demo` and `make test`.
PYTHON ?= python3

.PHONY: setup demo test bench
setup:
	bash tools/setup.sh

demo: setup
	$(PYTHON) -m ldpfleet.cli demo

test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider

bench: setup
	$(PYTHON) tools/bench.py
