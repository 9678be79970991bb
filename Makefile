# The two commands of the README: `make demo` (embedded default run) and `make test`.
PYTHON ?= python3

.PHONY: install demo test bench lint

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test]'

demo: install
	dpsynth demo --out dpsynth-out

lint:
	ruff check operators tests
	lint-imports

test: install lint
	$(PYTHON) -m pytest -q

bench: install
	dpsynth bench all --repeats 5
