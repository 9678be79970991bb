"""Test helpers for the tabular engine (``DPSYNTH_ENGINE=tabular``), next to :mod:`.testing`.

Layer: adapter (tests and benchmarks only). A small domain file, the worker's environment for the
tabular engine, the embedded :class:`~dpsynth.tabular.synthesizer.TabularSynthesizer`'s encoded
releases for comparison, and a checker of a synthetic topic against them.

Example::

    domain_file = write_domain(tmp_path / "domain.json")
    env = tabular_worker_env(bootstrap, topics, domain_file, tmp_path / "data")
    expected = embedded_tabular_release_records(codes, domain=..., epsilon=1.0, ...)
    check_tabular_against_embedded(read_topic(bootstrap, topics.output), expected, "test-run")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from dpsynth.release import DEFAULT_MAX_CHUNK_BYTES, decode_tabular_release, encode_tabular_release
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer
from dpsynth.testing.kafka import TEST_KEY_HEX, TopicRecord, Topics, worker_env
from tests.support.embedded import check_release_record

#: A small mixed domain: two labelled attributes and two sized ones (|X| = 3·2·4·5 = 120).
SMALL_DOMAIN: dict[str, Any] = {
    "version": 1,
    "name": "small-test",
    "attributes": [
        {"name": "colour", "categories": ["red", "green", "blue"]},
        {"name": "member", "categories": ["no", "yes"]},
        {"name": "age4", "size": 4},
        {"name": "score5", "size": 5},
    ],
}


def write_domain(path: Path, spec: Mapping[str, Any] | None = None) -> Path:
    """A domain file (default :data:`SMALL_DOMAIN`)."""
    path.write_text(json.dumps(dict(spec or SMALL_DOMAIN)))
    return path


def tabular_worker_env(
    bootstrap: str, topics: Topics, domain_file: Path, data_dir: Path, **overrides: Any
) -> dict[str, str]:
    """:func:`~dpsynth.testing.kafka.worker_env` for the tabular engine (no schema file)."""
    env = worker_env(bootstrap, topics, Path("unused"), data_dir, **overrides)
    del env["DPSYNTH_SCHEMA_FILE"]
    env.pop("DPSYNTH_MAX_DEPTH", None)
    env.update({"DPSYNTH_ENGINE": "tabular", "DPSYNTH_DOMAIN_FILE": str(domain_file)})
    return env


def feed_steps(synth: TabularSynthesizer, codes: np.ndarray) -> list[Any]:
    """Fixed batches of ``release_every`` records, each ended by ``step()`` (a public clock).

    The cut of ``extend`` under either notion: tests and benchmarks know their batch size, as
    paper 003's streams do; under add/remove ``extend`` itself is refused (docs/privacy.md P11).
    """
    out, start = [], 0
    while start < codes.shape[0]:
        take = min(synth.release_every - synth._n_pending, codes.shape[0] - start)
        synth.add(codes[start:start + take])
        start += take
        if synth._n_pending == synth.release_every:
            out.append(synth.step())
    return out


def embedded_tabular_release_records(
    codes: np.ndarray,
    *,
    domain: Domain,
    epsilon: float,
    release_every: int,
    run_id: str,
    partition: int,
    key_hex: str = TEST_KEY_HEX,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    **settings: Any,
) -> dict[int, list[bytes]]:
    """sequence → encoded records of every release the embedded synthesizer makes on ``codes``.

    ``settings``: method, counter, workloads_per_step (the synthesizer's defaults otherwise), as
    the worker without the ``DPSYNTH_TABULAR_*`` variables.
    """
    synth = TabularSynthesizer(domain, epsilon, bytes.fromhex(key_hex),
                               release_every=release_every, partition=partition, **settings)
    return {
        int(release.sequence): encode_tabular_release(
            release, run_id=run_id, partition=partition, max_chunk_bytes=max_chunk_bytes)
        for release in feed_steps(synth, codes)
    }


def check_tabular_against_embedded(
    records: list[TopicRecord], expected: Mapping[tuple[int, int], list[bytes]], run_id: str
) -> dict[str, int]:
    """Check a synthetic topic of the tabular engine against the embedded releases.

    ``expected`` maps (input partition, sequence) → encoded records. Asserts: every record on
    the topic is byte-identical to a record of the release its key names (a duplicate is an
    identical copy); reading each key's records in order (a header restarts a release, as a
    consumer does after a retried release) yields every expected release exactly once, equal to
    the embedded one. Returns counts (records, duplicates, releases).
    """
    expected_sets = {k: set(v) for k, v in expected.items()}
    seen: dict[bytes, int] = {}
    open_: dict[tuple[int, int], list[bytes]] = {}
    got: dict[tuple[int, int], int] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        slot = check_release_record(r, expected_sets, run_id)
        seen[r.value] = seen.get(r.value, 0) + 1
        kind = msgpack.unpackb(r.value, raw=False)["kind"]
        if kind == "header":
            open_[slot] = []
        if slot not in open_:
            continue  # the tail of a release already read
        open_[slot].append(r.value)
        if kind == "end":
            release = decode_tabular_release(open_.pop(slot))
            assert release == decode_tabular_release(expected[slot]), f"release {slot} differs"
            got[slot] = got.get(slot, 0) + 1
    assert sorted(got) == sorted(expected), (
        f"releases read {len(got)} != expected {len(expected)}; missing "
        f"{sorted(set(expected) - set(got))[:5]}, extra {sorted(set(got) - set(expected))[:5]}"
    )
    return {
        "records": len(records),
        "duplicates": sum(n - 1 for n in seen.values()),
        "releases": len(got),
        "releases_read_twice": sum(n - 1 for n in got.values()),
    }
