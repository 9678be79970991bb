"""Recorded topics in tests: the bundled example, a fresh topic filled from a recording, and the
merged synthetic dataset read back through the consumer library.

Layer: adapter (test kit shipped with the package: ``pip install dpsynth[testing]``). What the
pytest plugin's fixtures (:mod:`dpsynth.testing.plugin`) are made of, usable without pytest:

.. code-block:: python

    topic = import_to_new_topic("127.0.0.1:9092", example_recording())
    dataset = read_synthetic_dataset(topic)
    dataset.points.shape, dataset.columns, dataset.epsilon   # ((10000, 2), ('x', 'y'), 1.0)

:func:`example_recording` is a small recording of a synthetic topic (5 releases of the demo
run's generated stream, 10,000 points, ε = 1, the public demo key ``bytes(32)``: its noise is
public, so it is an example, not a private release). ``tests/support/example_recording.py``
of the dpsynth repository regenerates it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.client.consumer import ReleaseConsumer
from dpsynth.client.recording import RecordingHeader, RecordingReader
from dpsynth.client.transfer import import_recording
from dpsynth.schema import Schema

#: File name of the bundled example recording (package data: data/ beside this module).
EXAMPLE_RECORDING = "demo-synthetic.ndjson.gz"
#: Topic settings of the topics filled here: recorded timestamps may be older than any
#: retention, and a test topic must not lose records while the session runs.
TEST_TOPIC_CONFIG = {"retention.ms": "-1"}


def example_recording() -> Path:
    """The bundled recording of a synthetic topic (see the module docstring)."""
    return Path(__file__).with_name("data") / EXAMPLE_RECORDING


@dataclass(frozen=True)
class RecordedTopic:
    """A topic filled from a recording: where it is and what the recording said of it."""

    bootstrap: str
    topic: str
    header: RecordingHeader
    per_partition: Mapping[int, int]

    @property
    def records(self) -> int:
        """Records written into the topic."""
        return sum(self.per_partition.values())


def import_to_new_topic(bootstrap: str, recording: str | Path, *, topic: str | None = None,
                        timestamps: str = "recorded") -> RecordedTopic:
    """Import ``recording`` into a new topic (default: the recorded name plus a unique
    suffix, so tests never see each other's records); partitions as recorded."""
    with RecordingReader(recording) as reader:
        name = topic or f"{reader.header.topic}-{uuid.uuid4().hex[:10]}"
    summary = import_recording(bootstrap, recording, topic=name, timestamps=timestamps,
                               topic_config=TEST_TOPIC_CONFIG)
    return RecordedTopic(bootstrap, name, summary.header, summary.per_partition)


@dataclass(frozen=True)
class SyntheticDataset:
    """The synthetic dataset of a synthetic topic: the union of every input partition's
    latest release (docs/design.md D13), as the consumer library merges it.

    ``points`` are in the units of the recording's record schema when it names one (else in
    [0,1]^d, columns ``x0, x1, …``); ``releases`` maps each input partition to the
    (sequence, t) of its latest release.
    """

    points: np.ndarray
    columns: tuple[str, ...]
    run_id: str | None
    epsilon: float | None
    releases: Mapping[int, tuple[int, int]]

    def records(self) -> list[dict[str, float]]:
        """The points as records ``{column: value}``, as a consumer's code would take them."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.points.tolist()]

    def __len__(self) -> int:
        return len(self.points)


def read_synthetic_dataset(topic: RecordedTopic, *, schema: Schema | None = None,
                           timeout_s: float = 60.0) -> SyntheticDataset:
    """Read ``topic`` to its end through :class:`~dpsynth.client.consumer.ReleaseConsumer`
    (checked, de-duplicated releases) and merge the latest releases.

    ``schema`` (default: the recording header's ``record_schema``) maps the points back to
    the original units; the run is the header's ``run_id`` (all runs when it names none).
    """
    header = topic.header
    if schema is None and header.record_schema is not None:
        schema = Schema.from_dict(dict(header.record_schema))
    with ReleaseConsumer(topic.bootstrap, topic.topic, run_id=header.run_id) as consumer:
        consumer.read_to_end(timeout_s)
        if consumer.rejected:
            raise AssertionError(f"{consumer.rejected} incomplete or corrupt releases in "
                                 f"{topic.topic!r}: the recording is damaged")
        latest = {p: (key.sequence, release) for (_, p), (key, release)
                  in consumer.latest.items()}
        points = consumer.merge_latest(run_id=header.run_id, schema=schema)
    d = points.shape[1] if points.ndim == 2 else 0
    columns = schema.names if schema is not None else tuple(f"x{i}" for i in range(d))
    epsilon: Any = (header.release or {}).get("epsilon")
    if epsilon is None and latest:
        epsilon = next(iter(latest.values()))[1].metadata.get("epsilon")
    return SyntheticDataset(points, tuple(columns), header.run_id,
                            None if epsilon is None else float(epsilon),
                            {p: (seq, rel.t) for p, (seq, rel) in sorted(latest.items())})
