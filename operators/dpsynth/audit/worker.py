"""The worker as an audited entry point: ``dpsynth worker`` against a real Kafka broker.

Layer: audit. One worker run (``python -m dpsynth worker``, a subprocess, the default settings
but the run's notion, ε, a small depth and ``DPSYNTH_RELEASE_EVERY`` = the step size under
replacement; the point engine, or ``DPSYNTH_ENGINE=tabular`` with the audit's domain) reads one
input topic whose partitions hold D and every neighbour D′, each ``replicates`` times, and its
synthetic topic is read back, split by partition, and flattened record by record
(:mod:`dpsynth.audit.fields`).

Steps are public time (P11): every step's records are one message followed by a tick marker
of the run (signed with the run's marker key, as its worker writes them), for periods far in
the future, so the worker's own timer markers — written after the input, for the current
period — are older and skipped. The input is produced before the worker starts, so the steps
never depend on timing.

**Samples are (key, partition) pairs.** Noise is derived from HMAC-SHA256(key, context) and
every context holds the partition (P2), so two partitions of one run draw noise at different
PRF inputs: under the PRF assumption they are as independent as two keys. A sample's partition
is rotated among the inputs, so that no input always sits on one partition (the partition
number is an identity, not data, and must not look like a deterministic difference). One
worker run per distinct key costs a worker start-up; ``replicates``
partitions per input and run let 20 samples fit in a few runs.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.audit.entries import (
    AUDIT_EPSILON,
    AUDIT_MAX_DEPTH,
    EntryPoint,
    Output,
    run_id_of,
    table_domain,
)
from dpsynth.audit.fields import Fields, flatten_records
from dpsynth.audit.inputs import PER_STEP, AuditInput, point_input, table_input
from dpsynth.audit.measures import release_statistics, table_statistics
from dpsynth.audit.users import AUDIT_K, user_input, user_neighbours
from dpsynth.release import decode_release, decode_tabular_release
from dpsynth.stream.routing import partition_of as partition_of_key
from dpsynth.stream.ticks import MarkerKey
from dpsynth.testing.kafka import (
    Topics,
    WorkerProcess,
    create_topics,
    encode_records,
    end_offsets,
    produce_messages,
    read_topic,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)

#: Marker periods start here (ms; the year 2286): later than any real clock's period.
FUTURE_MS = 10**13
#: Partitions per input and worker run (samples that share one worker start-up).
REPLICATES = 4


def _records(step: np.ndarray) -> list[dict[str, Any]]:
    """A step's records as the raw-events topic holds them (the schema's or domain's names)."""
    if step.dtype.kind in "iu":
        return [dict(zip(table_domain().attributes, row, strict=True)) for row in step.tolist()]
    return records_of(step, [f"x{i}" for i in range(step.shape[1])])


def _messages(inputs: Sequence[AuditInput], partition_of: Callable[[int, int], int],
              replicates: int, markers: MarkerKey,
              partitions: int) -> list[tuple[int, bytes] | tuple[int, bytes, bytes]]:
    """Every input on its partitions: per step one message of its records (with users: one
    message per user, keyed by an id that Kafka's partitioner sends to that partition), then a
    marker."""
    out: list[tuple[int, bytes] | tuple[int, bytes, bytes]] = []
    for g, data in enumerate(inputs):
        for q in range(replicates):
            p = partition_of(g, q)
            for s, step in enumerate(data.steps):
                if data.users is not None:
                    out += _user_messages(step, data.users[s], p, partitions)
                elif len(step):
                    out.append((p, encode_records(_records(step))))
                out.append((p, markers.encode(p, FUTURE_MS + 1000 * s)))  # privacy: P11
    return out


def _user_messages(step: np.ndarray, users: Sequence[str], partition: int,
                   partitions: int) -> list[tuple[int, bytes, bytes]]:
    """One message per user of a step (its records in order), keyed by the user's id on
    ``partition`` (the privacy unit "user", P15: the worker checks the key's partition)."""
    order = list(dict.fromkeys(users))
    rows = _records(step)
    return [(partition, encode_records([r for r, u in zip(rows, users, strict=True)
                                        if u == user]), _user_key(user, partition, partitions))
            for user in order]


def _user_key(user: str, partition: int, partitions: int) -> bytes:
    """The first id ``user#j`` that Kafka's default partitioner sends to ``partition``."""
    j = 0
    while partition_of_key(f"{user}#{j}".encode(), partitions) != partition:
        j += 1
    return f"{user}#{j}".encode()


def _by_partition(records: list) -> dict[int, list[list[bytes]]]:
    """The synthetic topic's releases per input partition, in sequence order; each release its
    distinct records in offset order (a re-sent record is a byte-identical duplicate)."""
    releases: dict[tuple[int, int], list[bytes]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        _, partition, sequence = r.key.decode().rsplit("/", 2)
        held = releases.setdefault((int(partition), int(sequence)), [])
        if r.value not in held:
            held.append(r.value)
    out: dict[int, list[list[bytes]]] = {}
    for (partition, _), recs in sorted(releases.items()):
        out.setdefault(partition, []).append(recs)
    return out


def _output(releases: list[list[bytes]], tabular: bool) -> Output:
    fields: Fields = {"releases": len(releases)}
    for i, recs in enumerate(releases):
        flatten_records(recs, f"release[{i}]", fields)
    if tabular:
        return Output(fields, [np.asarray(decode_tabular_release(r).records) for r in releases])
    return Output(fields, [decode_release(recs) for recs in releases])


def _environment(bootstrap: str, topics: Topics, notion: str, key: bytes, run_id: str,
                 tabular: bool, workdir: Path, by_user: bool = False) -> dict[str, str]:
    """The worker's variables: the defaults but the audit's notion, ε, key and steps (and the
    privacy unit "user" with k = AUDIT_K)."""
    extra: dict[str, Any] = {"release_every": PER_STEP} if notion == "replace" else {}
    if by_user:
        extra.update(privacy_unit="user", max_contributions=AUDIT_K)
    env = worker_env(bootstrap, topics, write_schema(workdir / "schema.json", ("x0", "x1")),
                     workdir / "data", neighbours=notion, epsilon=AUDIT_EPSILON,
                     max_depth=AUDIT_MAX_DEPTH, noise_key=key.hex(), run_id=run_id,
                     tick_seconds=3600, release_linger_s=0, **extra)
    if tabular:
        domain = workdir / "domain.json"
        domain.write_text(json.dumps(table_domain().to_dict()))
        del env["DPSYNTH_SCHEMA_FILE"], env["DPSYNTH_MAX_DEPTH"]
        env.update({"DPSYNTH_ENGINE": "tabular", "DPSYNTH_DOMAIN_FILE": str(domain)})
    return env


def _one_run(bootstrap: str, notion: str, key: bytes, inputs: Sequence[AuditInput],
             replicates: int, round_: int, workdir: Path,
             tabular: bool) -> dict[tuple[int, int], Output]:
    """One worker run: (input g, replicate q) → its output."""
    groups = len(inputs)

    def partition_of(g: int, q: int) -> int:
        return q * groups + (g + q + round_) % groups  # rotated: see the module docstring

    topics = unique_topics("audit")
    create_topics(bootstrap, {topics.input: groups * replicates, topics.output: 1,
                              topics.dead_letter: 1})
    run_id = run_id_of(key)
    by_user = inputs[0].users is not None
    produce_messages(bootstrap, topics.input, _messages(
        inputs, partition_of, replicates, MarkerKey(key, run_id), groups * replicates))
    ends = end_offsets(bootstrap, topics.input)
    env = _environment(bootstrap, topics, notion, key, run_id, tabular, workdir, by_user)

    def done(metrics: dict[str, dict[str, float]]) -> bool:
        marks = metrics.get("dpsynth_watermark", {})
        return all(marks.get(str(p), -1) >= end - 1 for p, end in ends.items())

    with WorkerProcess(env, workdir / "worker.log") as worker:
        worker.wait_for(done, timeout_s=300)
    found = _by_partition(read_topic(bootstrap, topics.output))
    return {(g, q): _output(found.get(partition_of(g, q), []), tabular)
            for g in range(groups) for q in range(replicates)}


def worker_entry(notion: str, bootstrap: Callable[[], str], replicates: int = REPLICATES, *,
                 engine: str = "points", unit: str = "record") -> EntryPoint:
    """``dpsynth worker`` under ``notion``: the point engine (``DPSYNTH_MECHANISM`` auto) or
    ``engine="tabular"`` (its default mechanism and counter); ``unit="user"``: the point
    engine with ``DPSYNTH_PRIVACY_UNIT=user``, k = AUDIT_K, on D with a heavy user and its
    user-level neighbours (:mod:`dpsynth.audit.users`)."""
    tabular = engine == "tabular"

    def batch(inputs: Sequence[AuditInput], keys: Sequence[bytes]) -> list[list[Output]]:
        address = bootstrap()
        out: list[list[Output]] = [[] for _ in inputs]
        for round_, start in enumerate(range(0, len(keys), replicates)):
            width = min(replicates, len(keys) - start)
            with tempfile.TemporaryDirectory(prefix="dpsynth-audit-") as tmp:
                got = _one_run(address, notion, keys[start], inputs, width, round_, Path(tmp),
                               tabular)
            for g in range(len(inputs)):
                out[g] += [got[(g, q)] for q in range(width)]
        return out

    def single(data: AuditInput, key: bytes) -> Output:
        return batch([data], [key])[0][0]

    if tabular:
        return EntryPoint(f"worker:tabular:{notion}", notion, table_input, single,
                          table_statistics, batch=batch)
    if unit == "user":
        return EntryPoint(f"worker:auto:{notion}:user", notion, user_input, single,
                          release_statistics, batch=batch,
                          pairs=lambda data: user_neighbours(data, notion))
    return EntryPoint(f"worker:auto:{notion}", notion, point_input, single, release_statistics,
                      batch=batch)

