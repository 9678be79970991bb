"""The whole suite: one Kafka broker for every xdist worker of a parallel run.

Under ``pytest -n N`` (pytest-xdist; ``make test`` runs so) each worker is its own process, so
the plugin's session fixture would start or stop the broker per worker — one finishing early
would stop it under the others. The controlling process starts it once here instead (when the
broker's prerequisites are present and ``KAFKA_BOOTSTRAP_SERVERS`` is unset) and passes its
address down through that variable, which the plugin's fixture then uses as an external broker.
"""

from __future__ import annotations

import os

import pytest

from dpsynth.testing import broker

_BROKER = pytest.StashKey[broker.Broker]()


def _parallel_controller(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput"):  # an xdist worker
        return False
    return bool(config.pluginmanager.hasplugin("xdist") and
                config.getoption("numprocesses", default=None))


def pytest_configure(config: pytest.Config) -> None:
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
