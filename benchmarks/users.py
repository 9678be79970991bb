"""The privacy unit "user" (issue 16): accuracy, cost of bounding, state size, scale.

Layer: adapter (benchmark; ``python -m benchmarks user``). Five parts, each printed as a table
and returned for ``--json``:

``accuracy``
    Gowalla NYC in time order with its user ids, user-level ε (default 1), k = 1, 4, 16, 64:
    the final release's ℓ∞ tree W1 (depth 20) against the records that counted (the first k of
    each user) and against all records, next to offline PMM on the same bounded records at the
    same user-level ε (ε/k per record: group privacy over k records, as the online engine),
    under the same notion; medians over seeds (noise keys).
``cost``
    records/s of the embedded synthesizer on Gowalla, user unit (k = 16) against the record
    unit with the same mechanism and per-record ε, alternating, median of repeats — the cost
    of bounding.
``state``
    bytes on disk of the per-user counts in a partition's RocksDB store
    (:class:`~dpsynth.stream.store.PartitionStore`) for 10^6 users, committed the way the worker
    does (one atomic batch per commit), as written and after a flush and full compaction.
``scale``
    records/s of the embedded synthesizer with 10^7 records of 10^7 distinct users against the
    record unit (same mechanism, per-record ε, points and releases), alternating.
``worker``
    records/s of the worker's commit protocol (:class:`~dpsynth.stream.processor
    .PartitionProcessor`: decoding, key check, bounding, RocksDB commits of snapshot, watermark
    and user counts) over N messages of one record, each of a distinct user, against the record
    unit on the same messages; the broker is replaced by a sink that discards (Kafka's own cost
    is the same for both units, docs/benchmarks.md "Kafka worker").
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import click
import msgpack
import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.noise import machine_info
from dpsynth.bounding import UserCounts
from dpsynth.datasets import load_gowalla_users
from dpsynth.eval import w1_tree_upper
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.online.synthesizer import OnlineSynthesizer

KS = (1, 4, 16, 64)


def _key(seed: int, purpose: str) -> bytes:
    return (purpose.encode() + seed.to_bytes(4, "big")).ljust(32, b"\0")


def _synth(epsilon: float, key: bytes, release_every: int, neighbours: str,
           k: int | None, mechanism: str = "auto") -> OnlineSynthesizer:
    unit: dict[str, Any] = {} if k is None else {"privacy_unit": "user", "max_contributions": k}
    return OnlineSynthesizer(2, epsilon, key, release_every, mechanism, neighbours=neighbours,
                             **unit)


def _feed(synth: OnlineSynthesizer, x: np.ndarray, users: np.ndarray | None,
          step: int) -> np.ndarray:
    """Feed everything (steps of ``step`` records under add/remove, the batch model of
    the drift benchmark); returns the mask of counted records."""
    counted = np.ones(len(x), bool)
    for lo in range(0, len(x), step):
        part = None if users is None else users[lo:lo + step]
        if synth.neighbours == "replace":
            synth.extend(x[lo:lo + step], users=part)
        else:
            synth.add(x[lo:lo + step], users=part)
            synth.step()
        if synth.users is not None:
            counted[lo:lo + step] = synth.users.last_admitted
    return counted


def bounded_mask(users: np.ndarray, k: int) -> np.ndarray:
    """The first k records of each user (the bounding rule, without the synthesizer)."""
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_users)) + 1]
    rank = np.arange(len(users)) - np.repeat(starts, np.diff(np.r_[starts, len(users)]))
    mask = np.zeros(len(users), bool)
    mask[order[rank < k]] = True
    return mask


# -- accuracy ------------------------------------------------------------------------------------


def accuracy(epsilon: float, seeds: int, neighbours: str, release_every: int,
             ks: tuple[int, ...] = KS) -> list[dict[str, Any]]:
    """W1 of the final release for each k against PMM on the same bounded records."""
    x, users = load_gowalla_users()
    rows = []
    for k in ks:
        mask = bounded_mask(users, k)
        results = []
        for seed in range(seeds):
            synth = _synth(epsilon, _key(seed, "online"), release_every, neighbours, k)
            counted = _feed(synth, x, users, release_every)
            assert (counted == mask).all()  # the synthesizer bounds as the rule says
            y = synth.release().points
            bounded = x[mask]
            pmm = pmm_synthesize(bounded, epsilon / k, _key(seed, "pmm"),
                                 neighbours=neighbours,
                                 size_hint=len(bounded) if neighbours == "add_remove" else None)
            results.append({
                "w1": w1_tree_upper(bounded, y, depth=20) if len(y) else 1.0,
                "w1_all": w1_tree_upper(x, y, depth=20) if len(y) else 1.0,
                "w1_pmm": w1_tree_upper(bounded, pmm, depth=20),
                "loss": synth.worst_case_loss})
        w1, w1_pmm = median(r["w1"] for r in results), median(r["w1_pmm"] for r in results)
        rows.append({"k": k, "counted": int(mask.sum()), "records": len(x), "w1": w1,
                     "w1_all": median(r["w1_all"] for r in results), "w1_pmm": w1_pmm,
                     "ratio": w1 / w1_pmm, "loss": max(r["loss"] for r in results),
                     "seeds": seeds})
    return rows


# -- speed ---------------------------------------------------------------------------------------


def _alternate(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median seconds of each run, the runs alternated (a fresh object per run)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(run())
    return {name: median(values) for name, values in times.items()}


def _ingest_runs(x: np.ndarray, users: np.ndarray, k: int, release_every: int,
                 epsilon: float) -> dict[str, Callable[[], float]]:
    def run(unit: str) -> float:
        if unit == "user":
            synth = _synth(epsilon, _key(0, "speed"), release_every, "replace", k)
        else:  # the same mechanism at the user unit's per-record ε
            synth = _synth(epsilon / k, _key(0, "speed"), release_every, "replace", None)
        start = time.perf_counter()
        _feed(synth, x, users if unit == "user" else None, 100_000)
        return time.perf_counter() - start

    return {"record": lambda: run("record"), "user": lambda: run("user")}


def cost(repeats: int, epsilon: float, k: int) -> dict[str, Any]:
    """Embedded records/s on Gowalla (input records per second), record unit vs user unit.

    With k = 2048 (above the heaviest user's 1,794 check-ins) every record counts in both
    runs: the difference is the cost of bounding itself. With a small k the user run feeds the
    mechanism fewer records, which can make it faster.
    """
    x, users = load_gowalla_users()
    runs = _ingest_runs(x, users, k, 1000, epsilon)
    runs["record"](), runs["user"]()  # compile and warm the caches
    seconds = _alternate(runs, repeats)
    return {"records": len(x), "k": k, "counted": int(bounded_mask(users, k).sum()),
            "release_every": 1000, **{f"{u}_per_s": len(x) / s for u, s in seconds.items()},
            "ratio": seconds["record"] / seconds["user"], "repeats": repeats}


def scale(n: int, repeats: int, epsilon: float) -> dict[str, Any]:
    """Embedded records/s with ``n`` records of ``n`` distinct users (k = 1) vs the record
    unit; a release every 10^5 records."""
    x = np.random.default_rng(7).random((n, 2))
    users = np.arange(n, dtype=np.int64)
    runs = _ingest_runs(x, users, 1, 100_000, epsilon)
    warm = _ingest_runs(x[:200_000], users[:200_000], 1, 100_000, epsilon)
    warm["record"](), warm["user"]()
    seconds = _alternate(runs, repeats)
    return {"records": n, "users": n, "release_every": 100_000,
            **{f"{u}_per_s": n / s for u, s in seconds.items()},
            "ratio": seconds["record"] / seconds["user"], "repeats": repeats}


# -- state ---------------------------------------------------------------------------------------


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def state_size(users: int, per_commit: int, k: int) -> dict[str, Any]:
    """Bytes on disk of ``users`` users' counts, committed ``per_commit`` at a time."""
    from dpsynth.stream.store import PartitionStore

    rng = np.random.default_rng(3)
    work = Path(tempfile.mkdtemp(prefix="dpsynth-user-state-"))
    try:
        store = PartitionStore(work / "p0", partition=0, run_id="bench", sync=False)
        start = time.perf_counter()
        for lo in range(0, users, per_commit):
            m = min(per_commit, users - lo)
            keys = rng.integers(0, 2**63, (m, 2), dtype=np.uint64) | np.uint64(1)
            counts = rng.integers(1, k + 1, m).astype(np.uint16)
            store.commit(b"snapshot", watermark=lo, t=lo, sequence=0, config={},
                         users=UserCounts(keys, counts))
        seconds = time.perf_counter() - start
        written = _dir_bytes(work / "p0")
        store._db.flush()  # noqa: SLF001 - the benchmark measures the files
        store._db.compact_range(None, None)  # noqa: SLF001
        compacted = _dir_bytes(work / "p0")
        store.close()
        closed = _dir_bytes(work / "p0")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_million = 1e6 / users
    return {"users": users, "per_commit": per_commit, "bytes_written_dir": written,
            "bytes_compacted": compacted, "bytes_closed": closed,
            "mb_per_million_as_written": written * per_million / 2**20,
            "mb_per_million_compacted": compacted * per_million / 2**20,
            "commits_per_s": users / per_commit / seconds}


# -- the worker's commit protocol ----------------------------------------------------------------


class _DiscardSink:
    """A :class:`~dpsynth.stream.output.TransactionalSink` that drops everything (no broker)."""

    def begin(self) -> None:
        """Nothing to open."""

    def send(self, topic: str, key: bytes, value: bytes | None,
             partition: int | None = None) -> None:
        """Drop."""

    def flush(self) -> None:
        """Nothing queued."""

    def commit(self, offset: int | None) -> None:
        """Nothing to commit."""

    def abort(self) -> None:
        """Nothing to abort."""


def worker_speed(n: int, batch: int, repeats: int, cache: int = 1 << 20) -> dict[str, Any]:
    """Records/s of :class:`PartitionProcessor` on ``n`` one-record messages of distinct
    users, user unit (k = 1) vs record unit, alternating."""
    from dpsynth.stream.processor import InputMessage, PartitionProcessor
    from dpsynth.stream.settings import load_config
    from dpsynth.stream.store import PartitionStore

    rng = np.random.default_rng(5)
    xy = rng.random((n, 2))
    values = [msgpack.packb({"x": float(a), "y": float(b)}) for a, b in xy]
    keys = [str(i).encode() for i in range(n)]

    def run(unit: str) -> float:
        work = Path(tempfile.mkdtemp(prefix="dpsynth-user-worker-"))
        schema = work / "schema.json"
        schema.write_text(json.dumps({"version": 1, "columns": [
            {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]}))
        env = {"DPSYNTH_BROKER": "127.0.0.1:9", "DPSYNTH_SCHEMA_FILE": str(schema),
               "DPSYNTH_EPSILON": "1.0", "DPSYNTH_RUN_ID": "b",
               "DPSYNTH_NOISE_KEY": "ab" * 32, "DPSYNTH_DATA_DIR": str(work),
               "DPSYNTH_RELEASE_EVERY": "10000", "DPSYNTH_STATE_SYNC": "false"}
        if unit == "user":  # one partition: every key is this partition's
            env.update(DPSYNTH_PRIVACY_UNIT="user", DPSYNTH_MAX_CONTRIBUTIONS="1",
                       DPSYNTH_INPUT_PARTITIONS="1", DPSYNTH_USER_CACHE_ENTRIES=str(cache))
        config = load_config(env)
        store = PartitionStore(work / "p0", partition=0, run_id="b", sync=False)
        proc = PartitionProcessor(config, 0, store=store, sink=_DiscardSink())
        try:
            start = time.perf_counter()
            for lo in range(0, n, batch):
                proc.process([InputMessage(i, values[i], key=keys[i])
                              for i in range(lo, min(lo + batch, n))])
            proc.commit()
            return time.perf_counter() - start
        finally:
            proc.close()
            shutil.rmtree(work, ignore_errors=True)

    runs = {"record": lambda: run("record"), "user": lambda: run("user")}
    seconds = _alternate(runs, repeats)
    return {"messages": n, "batch": batch, "user_cache_entries": cache,
            **{f"{u}_per_s": n / s for u, s in seconds.items()},
            "ratio": seconds["record"] / seconds["user"], "repeats": repeats}


def worker_kafka(n: int, bootstrap: str | None, kafka_dir: str, timeout_s: float = 1800.0
                 ) -> dict[str, Any]:
    """The worker on a real broker: ``n`` one-record messages, each keyed by its own user
    (Kafka's default partitioner), record unit then user unit (k = 1) on the same topic;
    records/s from the partition's assignment (it shows in /metrics) to t = n with the input's
    last offset committed (the method of ``benchmarks.kafka``)."""
    import os

    from dpsynth.testing import broker
    from dpsynth.testing.kafka import Topics, create_topics

    with contextlib.ExitStack() as stack:
        if bootstrap is None:
            os.environ["DPSYNTH_KAFKA_DIR"] = kafka_dir
            bootstrap = stack.enter_context(broker.local_broker())
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        tag = time.time_ns()
        topic = f"bench-users-{tag}"
        create_topics(bootstrap, {topic: 1})
        _produce_keyed(bootstrap, topic, n)
        out = {}
        for unit in ("record", "user"):
            topics = Topics(topic, f"{topic}-{unit}-out", f"{topic}-{unit}-dead")
            create_topics(bootstrap, {topics.output: 1, topics.dead_letter: 1})
            settings = {} if unit == "record" else {"privacy_unit": "user",
                                                     "max_contributions": 1}
            out[unit] = _timed_worker(bootstrap, topics, work / unit, n, timeout_s, settings)
    return {"messages": n, **{f"{u}_per_s": r for u, r in out.items()},
            "ratio": out["user"] / out["record"]}


def _timed_worker(bootstrap: str, topics: Any, work: Path, n: int, timeout_s: float,
                  settings: dict[str, Any]) -> float:
    from dpsynth.testing.kafka import WorkerProcess, worker_env, write_schema

    work.mkdir(parents=True)
    env = worker_env(bootstrap, topics, write_schema(work / "schema.json"), work / "data",
                     release_every=10_000, max_depth=20, state_sync="true", log_level="warn",
                     group_id=f"{topics.output}-group", run_id="bench", **settings)
    with WorkerProcess(env, work / "worker.log") as worker:
        worker.wait_ready(timeout_s=120)
        deadline, assigned = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            m = worker.metrics()
            if "0" in m.get("dpsynth_t", {}):
                assigned = assigned or time.monotonic()
                if m["dpsynth_t"]["0"] >= n and m["dpsynth_watermark"]["0"] >= n - 1:
                    return n / (time.monotonic() - assigned)
            time.sleep(0.02)
        raise TimeoutError(f"worker not done in {timeout_s} s:\n{worker.log_tail()}")


def _produce_keyed(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "partitioner": "murmur2_random", "enable.idempotence": True})
    xy = np.random.default_rng(9).random((n, 2))
    for i in range(n):
        value = msgpack.packb({"x": float(xy[i, 0]), "y": float(xy[i, 1])})
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError(f"producing to {topic} did not finish")


# -- the command ---------------------------------------------------------------------------------


def _table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for name in columns:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


@click.command(name="user")
@click.option("--part", type=click.Choice(["accuracy", "cost", "state", "scale", "worker",
                                           "worker-kafka", "all"]), default="all",
              show_default=True, help="all: every part but worker-kafka (a broker, minutes).")
@click.option("--worker-kafka-messages", type=click.IntRange(min=10_000), default=200_000,
              show_default=True, help="worker-kafka: one-record messages of distinct users.")
@click.option("--bootstrap", help="worker-kafka: a running broker (default: start one).")
@click.option("--kafka-dir", default="/tmp/bk-kafka", show_default=True,  # noqa: S108
              help="worker-kafka: run directory of the broker started here.")
@click.option("--epsilon", type=float, default=1.0, show_default=True,
              help="User-level ε (accuracy, cost, scale).")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True,
              help="accuracy: noise keys per k.")
@click.option("--neighbours", type=click.Choice(["replace", "add_remove"]), default="replace",
              show_default=True, help="accuracy: the notion (both engines).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="cost, scale, worker: alternated repeats; medians are reported.")
@click.option("--users", "n_users", type=click.IntRange(min=1), default=1_000_000,
              show_default=True, help="state: users stored.")
@click.option("--scale-records", type=click.IntRange(min=1000), default=10_000_000,
              show_default=True, help="scale: records (each of its own user).")
@click.option("--worker-messages", type=click.IntRange(min=1000), default=1_000_000,
              show_default=True, help="worker: one-record messages (each of its own user).")
@click.option("--worker-cache", type=click.IntRange(min=1), default=1 << 20,
              show_default=True, help="worker: DPSYNTH_USER_CACHE_ENTRIES (below the number "
              "of users: the store is read for users not in memory, as with 10^7 users).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the results to this JSON file.")
def bench_users(part: str, worker_kafka_messages: int, bootstrap: str | None, kafka_dir: str,
                epsilon: float, seeds: int, neighbours: str, repeats: int, n_users: int,
                scale_records: int, worker_messages: int, worker_cache: int,
                json_path: Path | None) -> None:
    """The privacy unit "user": accuracy on Gowalla vs PMM, bounding's cost, state, scale."""
    console = Console(width=150)
    out: dict[str, Any] = {"machine": machine_info()}
    if part in ("accuracy", "all"):
        with console.status("accuracy on Gowalla…"):
            rows = out["accuracy"] = accuracy(epsilon, seeds, neighbours, 1000)
        console.print(_table(
            f"Gowalla, user-level ε = {epsilon:g}, {neighbours}, a release every 1000 counted "
            "records: final release, ℓ∞ tree W1 (depth 20), medians over seeds",
            ["k", "counted / all", "W1 (counted)", "PMM W1 (counted)", "× PMM", "W1 (all)",
             "user loss"],
            [[str(r["k"]), f"{r['counted']:,} / {r['records']:,}", f"{r['w1']:.4f}",
              f"{r['w1_pmm']:.4f}", f"{r['ratio']:.2f}", f"{r['w1_all']:.4f}",
              f"{r['loss']:.4f}"] for r in rows]))
    speeds: list[tuple[str, dict[str, Any]]] = []
    if part in ("cost", "all"):
        for k in (2048, 16):
            with console.status(f"cost of bounding on Gowalla, k = {k}…"):
                result = out[f"cost_k{k}"] = cost(repeats, epsilon, k)
            speeds.append((f"Gowalla, k = {k} ({result['counted']:,} of "
                           f"{result['records']:,} counted)", result))
    if part in ("scale", "all"):
        with console.status(f"{scale_records:,} distinct users, embedded…"):
            out["scale"] = scale(scale_records, repeats, epsilon)
        speeds.append((f"{scale_records:,} distinct users, embedded", out["scale"]))
    if part in ("worker", "all"):
        with console.status(f"{worker_messages:,} distinct users, the worker's protocol…"):
            out["worker"] = worker_speed(worker_messages, 2000, repeats, worker_cache)
        speeds.append((f"{worker_messages:,} distinct users, worker protocol (no broker), "
                       f"user cache {worker_cache:,}", out["worker"]))
    if part == "worker-kafka":
        with console.status(f"{worker_kafka_messages:,} distinct users through Kafka…"):
            out["worker_kafka"] = worker_kafka(worker_kafka_messages, bootstrap, kafka_dir)
        speeds.append((f"{worker_kafka_messages:,} distinct users, worker on a real broker",
                       out["worker_kafka"]))
    if speeds:
        console.print(_table(
            "records/s (median of alternated repeats): record unit vs user unit, same mechanism",
            ["workload", "record unit", "user unit", "user / record"],
            [[name, f"{r['record_per_s']:,.0f}", f"{r['user_per_s']:,.0f}",
              f"{r['ratio']:.2f}"] for name, r in speeds]))
    if part in ("state", "all"):
        with console.status(f"state of {n_users:,} users…"):
            s = out["state"] = state_size(n_users, 2000, 16)
        console.print(_table(
            f"per-user counts in RocksDB: {n_users:,} users, {s['per_commit']:,} per commit",
            ["as written (MB / 10⁶ users)", "flushed + compacted", "commits/s"],
            [[f"{s['mb_per_million_as_written']:.1f}", f"{s['mb_per_million_compacted']:.1f}",
              f"{s['commits_per_s']:,.0f}"]]))
    if json_path is not None:
        json_path.write_text(json.dumps(out, indent=1, default=str))
