# The two commands of the README: `make run` (embedded default run; `make demo` is an alias)
# and `make test`. Everything is installed into a project virtual environment (.venv), never
# into the system interpreter (PEP 668), and CI runs the same targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run demo test bench lint clean-venv

# A venv even where the interpreter lacks ensurepip (Debian/Ubuntu without python3-venv):
# create it without pip, then let the system's pip install pip into it.
$(PY):
	$(PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV) && $(PYTHON) -m venv --without-pip $(VENV); }
	$(PY) -m pip --version >/dev/null 2>&1 || $(PYTHON) -m pip --python $(PY) install --quiet pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/dpsynth run --out dpsynth-out

demo: run

lint: install
	$(VENV)/bin/ruff check operators tests benchmarks
	$(VENV)/bin/lint-imports

test: install lint
	$(PY) -m pytest -q

bench: install
	$(PY) -m benchmarks core all --repeats 5

clean-venv:
	rm -rf $(VENV)
