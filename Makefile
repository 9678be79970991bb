# The two commands of the README: `make run` (the embedded default run, `dpsynth run`) and
# `make test`; `make demo` runs `dpsynth demo`, `make shell` opens a shell with `dpsynth` on PATH,
# `make dist` builds and checks the wheel and the sdist. Everything is installed into a project virtual environment (.venv), never
# into the system interpreter (PEP 668), and CI runs the same targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# examples/downstream runs in a virtual environment of its own, made afresh each time.
DOWNSTREAM_VENV ?= .venv-downstream
# make dist installs the built wheel into a clean virtual environment of its own.
DIST_VENV ?= .venv-dist

# The container image (deploy/Dockerfile): podman (or docker where an engine answers), on a
# registry base where one can be pulled, else on a Debian base made with debootstrap (cached in
# ~/.cache/dpsynth/base). podman reads deploy/containers.conf (runc, cgroupfs, ulimits within a
# CI machine's hard limits) unless CONTAINERS_CONF is set.
IMAGE ?= dpsynth:0.1.0
export DPSYNTH_IMAGE := $(IMAGE)
export CONTAINERS_CONF ?= $(CURDIR)/deploy/containers.conf

.PHONY: install run demo shell dist test bench lint clean-venv downstream example-recording vectors \
	java-test view-screenshot image image-test image-if-engine

# $(call make-venv,DIR): a venv even where the interpreter lacks ensurepip (Debian/Ubuntu without
# python3-venv): create it without pip, then let the system's pip install pip into it.
define make-venv
$(PYTHON) -m venv $(1) 2>/dev/null || { rm -rf $(1) && $(PYTHON) -m venv --without-pip $(1); }
$(1)/bin/python -m pip --version >/dev/null 2>&1 || $(PYTHON) -m pip --python $(1)/bin/python install --quiet pip
endef

$(PY):
	$(call make-venv,$(VENV))

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/dpsynth run --out dpsynth-out
	@echo "dpsynth is in $(VENV)/bin: '. $(VENV)/bin/activate' (or 'make shell') puts it on PATH"

demo: install
	$(VENV)/bin/dpsynth demo --out dpsynth-demo-out

# A shell with the project's virtual environment first on PATH (exit it to come back).
shell: install
	@echo "dpsynth is on PATH in this shell; 'exit' leaves it"
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" VIRTUAL_ENV="$(CURDIR)/$(VENV)" $${SHELL:-/bin/sh} -i

# The wheel and the sdist in dist/, checked as a user would meet them: twine check, then the
# wheel with [testing] (the pytest plugin and `dpsynth topics`) in a clean virtual environment:
# dpsynth --version, topics export --help and a short embedded run.
dist: install
	rm -rf dist build
	$(PY) -m build --sdist --wheel --outdir dist .
	$(PY) -m twine check --strict dist/*
	rm -rf $(DIST_VENV)
	$(call make-venv,$(DIST_VENV))
	$(DIST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  "$$(ls dist/dpsynth-*.whl)[testing]"
	$(DIST_VENV)/bin/dpsynth --version
	$(DIST_VENV)/bin/dpsynth topics export --help > /dev/null
	cd $(DIST_VENV) && bin/dpsynth run --points 2000 --release-every 1000 --no-report \
	  --out smoke-out
	@ls dist

lint: install
	$(VENV)/bin/ruff check operators tests benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# The suite runs in PYTEST_WORKERS processes (pytest-xdist): much of it waits on brokers and
# workers, so three processes keep two cores busy. One broker serves them all (tests/conftest.py).
PYTEST_WORKERS ?= 3

test: install lint java-test image-if-engine
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal
	$(MAKE) downstream

# The JVM reader (clients/java): its JUnit tests (the conformance vectors) and its jar, which
# tests/integration/test_java_reader.py runs against the worker's topic. The first build
# downloads Maven's plugins and the reader's dependencies from Maven Central.
JAVA_DIR := clients/java
java-test:
	@if command -v mvn >/dev/null && command -v java >/dev/null; then \
	  cd $(JAVA_DIR) && mvn -B -q package && grep -h "Tests run" target/surefire-reports/*.txt; \
	else echo "java-test SKIPPED: install Java 17 and Maven to build and test clients/java"; fi

image:
	PYTHON=$(PYTHON) bash deploy/image.sh build

# The image against the local broker (tests/integration/test_image.py): releases byte-identical
# to the embedded run, kill -9 and restart, scale 1 -> 2 -> 1. Here a missing engine or image
# fails; in `make test` the module skips naming the packages (podman runc debootstrap), except
# where DPSYNTH_IMAGE_REQUIRED=1 (CI).
image-test: install
	DPSYNTH_IMAGE_REQUIRED=1 $(PY) -m pytest -q tests/integration/test_image.py

# `make test` builds the image first wherever a container engine is installed (a warm build
# takes seconds), so the image test never runs an image older than the checkout.
image-if-engine:
	@if bash deploy/image.sh engine >/dev/null 2>&1; then $(MAKE) image; \
	else echo "no container engine: the image is not built and its test skips" \
	          "(apt-get install podman runc debootstrap)"; fi

# A consuming team's project (examples/downstream): a clean virtual environment, the README's
# install line (dpsynth[testing], here from this checkout), its own pytest against the bundled
# recording, with a broker the plugin starts (a missing broker fails, it is not skipped).
downstream:
	rm -rf $(DOWNSTREAM_VENV) build  # build/: setuptools would reuse stale copies of modules
	$(call make-venv,$(DOWNSTREAM_VENV))
	$(DOWNSTREAM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "$(CURDIR)[testing]"
	cd examples/downstream && DPSYNTH_KAFKA_REQUIRED=1 $(CURDIR)/$(DOWNSTREAM_VENV)/bin/python -m pytest -q

# The example recording shipped with dpsynth[testing] (tests/regression/test_example_recording.py
# fails until it is regenerated after a change of the release format or of the demo run).
example-recording: install
	$(PY) -m tests.support.example_recording

# The release-format conformance vectors (schemas/conformance/vectors.json; schemas/README.md).
vectors: install
	$(PY) -m tests.support.conformance

# docs/img/dpsynth-view.png: dpsynth view of a topic, in headless Chromium (chromium and
# chromium-driver from Debian), taken by its browser test.
view-screenshot: install
	DPSYNTH_VIEW_SCREENSHOT=docs/img/dpsynth-view.png $(PY) -m pytest -q \
	  tests/integration/test_view_browser.py -k topic

bench: install
	$(PY) -m benchmarks core all --repeats 5

clean-venv:
	rm -rf $(VENV)
