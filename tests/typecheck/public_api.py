"""The public API as a user's code meets it, type-checked strictly by `make lint` (mypy).

Not run by pytest: mypy checks it (``[tool.mypy]`` in pyproject.toml), so a public signature
that stops type-checking for users, or a name that stops being exported (a typo in an import
would otherwise read as ``Any``), fails lint. The calls follow the README's examples.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import assert_type

import numpy as np
from numpy.typing import NDArray

from dpsynth import (
    OnlineSynthesizer,
    Release,
    Schema,
    Synthesizer,
    TabularRelease,
    TabularSynthesizer,
    feed,
)
from dpsynth.accounting import check_budget, paper_schedule
from dpsynth.client import ReleaseConsumer
from dpsynth.clock import TickClock
from dpsynth.counters import LevelCounters
from dpsynth.noise import KeyedNoise
from dpsynth.online.config import OnlineConfig
from dpsynth.settings import SynthesisSettings
from dpsynth.tabular.config import TabularConfig
from dpsynth.tabular.domain import Attribute, Domain


def online_steps() -> Release:
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(32), release_every=1000,
                              neighbours="add_remove")
    synth.add(np.random.default_rng(1).random((700, 2)))
    release = synth.step()
    assert_type(release.leaf_counts, NDArray[np.int64])
    assert_type(release.points, NDArray[np.float64])
    return release


def online_extend() -> list[int]:
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(32), release_every=100,
                              privacy_unit="user", max_contributions=4)
    releases = synth.extend(np.random.default_rng(2).random((1000, 2)),
                            users=[i % 50 for i in range(1000)])
    assert_type(releases, list[Release])
    assert_type(synth.tick(), Release | None)
    return [r.t for r in releases]


def online_config() -> float:
    config = OnlineConfig.resolve(2, 1.0, 1000, privacy_unit="user", max_contributions=4)
    assert_type(config.record_epsilon, float)
    assert_type(config.max_contributions, int | None)
    synth = OnlineSynthesizer.from_config(config, bytes(32))
    assert_type(synth.config, OnlineConfig)
    settings = SynthesisSettings.of(epsilon=1.0)
    assert_type(settings.epsilon, float)  # the settings' fields are typed (issue 45)
    assert_type(settings.max_contributions, int | None)
    return settings.config(2).record_epsilon


def counters() -> tuple[int, ...]:
    schedule = paper_schedule(d=2, epsilon=1.0)
    assert check_budget(schedule) <= 1.0
    clock = TickClock(epsilon=1.0, release_every=100)
    j = 3
    cells = LevelCounters(2**j, lambda r: schedule.level_epsilon(j, r), j, clock,
                          KeyedNoise(bytes(32)), ("cells", j))
    cells.update(np.array([0, 5]), np.array([40, 60]))
    return cells.values().shape


def tabular() -> TabularRelease:
    domain = Domain([Attribute("a", 3), Attribute("b", 2)])
    synth = TabularSynthesizer(domain, 1.0, bytes(32), release_every=100)
    synth.add(np.zeros((10, 2), np.int64))
    return synth.step()


def tabular_config() -> float:
    domain = Domain([Attribute("a", 3), Attribute("b", 2)])
    config = TabularConfig.resolve(domain, 1.0, 100, neighbours="replace")
    assert_type(config.workloads_per_step, int)  # resolved: max(1, round(2ε)) when unset
    assert_type(config.eps_measure, float)
    synth = TabularSynthesizer.from_config(config, bytes(32))
    assert_type(synth.config, TabularConfig)
    return synth.config.worst_case_loss


def contract(chunks: list[tuple[NDArray[np.float64], None]]) -> Iterator[Release]:
    synth: Synthesizer[Release] = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(32),
                                                    release_every=10)
    for _, releases in feed(synth, chunks, steps=False):
        yield from releases


def consume(bootstrap: str) -> tuple[int, ...]:
    with ReleaseConsumer(bootstrap, "dpsynth-synthetic", run_id="compose-demo") as consumer:
        consumer.read_to_end()
        for (_, partition), (key, release) in sorted(consumer.latest.items()):
            print(partition, key.sequence, release.t)
        schema = Schema.from_json_file("schemas/example-schema.json")
        return consumer.merge_latest(schema=schema).shape
