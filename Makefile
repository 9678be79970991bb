# The two commands of the README: `make run` (embedded default run; `make demo` is an alias)
# and `make test`.
PYTHON ?= python3

.PHONY: install run demo test bench lint

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test]'

run: install
	dpsynth run --out dpsynth-out

demo: run

lint:
	ruff check operators tests
	lint-imports

test: install lint
	$(PYTHON) -m pytest -q

bench: install
	dpsynth bench all --repeats 5
