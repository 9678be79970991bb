"""The whole suite: one Kafka broker for every xdist worker of a parallel run.

Under ``pytest -n N`` (pytest-xdist; ``make test`` runs so) each worker is its own process, so
the plugin's session fixture would start or stop the broker per worker — one finishing early
would stop it under the others. The controlling process starts it once here instead (when the
broker's prerequisites are present and ``KAFKA_BOOTSTRAP_SERVERS`` is unset) and passes its
address down through that variable, which the plugin's fixture then uses as an external broker.

Noise keys are bound to the input they ran over, in ``DPSYNTH_STATE_DIR`` (docs/privacy.md P13):
tests reuse fixed keys over many inputs, so each test gets a state directory of its own (and the
session one, for fixtures wider than a test), never the user's.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from dpsynth.keybinding import STATE_DIR_ENV
from dpsynth.testing import broker

_BROKER = pytest.StashKey[broker.Broker]()


def _parallel_controller(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput"):  # an xdist worker
        return False
    return bool(config.pluginmanager.hasplugin("xdist") and
                config.getoption("numprocesses", default=None))


def pytest_configure(config: pytest.Config) -> None:
    os.environ[STATE_DIR_ENV] = tempfile.mkdtemp(prefix="dpsynth-test-state-")
    if (not _parallel_controller(config) or os.environ.get(broker.ENV_BOOTSTRAP, "").strip()
            or broker.missing_prerequisites()):
        return
    handle = broker.acquire_broker()
    os.environ[broker.ENV_BOOTSTRAP] = handle.bootstrap  # inherited by the workers
    config.stash[_BROKER] = handle


def pytest_unconfigure(config: pytest.Config) -> None:
    handle = config.stash.get(_BROKER, None)
    if handle is not None:
        os.environ.pop(broker.ENV_BOOTSTRAP, None)
        broker.release_broker(handle)


@pytest.fixture(autouse=True)
def key_state_dir(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own state directory: a key's binding to its input ends with the test."""
    path = tmp_path_factory.mktemp("key-state")
    monkeypatch.setenv(STATE_DIR_ENV, str(path))
    return path
