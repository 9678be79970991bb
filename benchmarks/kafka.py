"""``dpsynth bench-kafka``: records/s of the Kafka operator from produce to release (issue 4).

Layer: adapter (benchmark; confluent-kafka, Faust, subprocesses). One run against a real broker
(``deploy/kafka-local.sh``'s, started and stopped here when no ``--bootstrap`` is given):

1. pre-produce the input topics: ``messages`` msgpack maps, one record per message (topic A),
   and ``records`` records in 1000-record msgpack arrays (topic B); d = 2, uniform points;
2. run each variant as its own process with a fresh consumer group (and data directory):

   (a) ``faust-table``: a plain Faust agent that, for every record, decodes it, computes its cell
       id (a 2^10 × 2^10 grid, i.e. depth 20) and does ``table[cell] += 1`` on a RocksDB-backed
       Faust table (``store="rocksdb://"``, changelog topic included) — the straightforward
       design; topic A;
   (b) ``faust-noop``: a Faust agent that only iterates the events; topic A;
   (c) ``dpsynth-1``: ``python -m dpsynth worker`` on topic A (d = 2, ε = 1, a release
       every 10^4 records, the worker's defaults otherwise: depth 20, fsync on commit);
   (d) ``dpsynth-1000``: the same worker on topic B;
   (e) ``raw``: a confluent-kafka consumer that consumes topic A (no decoding);

3. records/s = records ÷ (last record processed, or last release acknowledged by the broker,
   − first record consumed). The Faust and raw children time themselves (wall clock). The
   dpsynth worker does not expose its first consumption, so its start is the moment its
   partition shows up in ``/metrics`` (assigned, state opened: just *before* the first fetch),
   and its end the first ``/metrics`` poll (every 20 ms) that shows t = all records and every
   release acknowledged: the dpsynth rates are lower bounds.

The release latency at t = 10^6 of (d) is read from the worker's histogram
``dpsynth_release_latency_seconds`` (arrival of the tick's last record at the worker → release
acknowledged): the increase of its sum between the polls around the release with t = 10^6.

.. code-block:: console

    $ dpsynth bench-kafka --messages 200000 --records 1000000 --json bench-kafka.json
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import numpy as np

from dpsynth.testing import broker
from dpsynth.testing.kafka import (
    Topics,
    WorkerProcess,
    create_topics,
    encode_records,
    produce_messages,
    records_of,
    worker_env,
    write_schema,
)

RELEASE_EVERY = 10_000
EPSILON = 1.0
PER_MESSAGE = 1000
#: Cells per axis of the plain Faust agent's grid (2^10 × 2^10 = depth 20 for d = 2).
GRID = 1024
#: Run directory of the broker this benchmark starts (not the test suite's ``.kafka``).
DEFAULT_KAFKA_DIR = "/tmp/bk-kafka"  # noqa: S108 - a run dir for a local test broker
POLL_S = 0.02
VARIANTS = ("faust-table", "faust-noop", "dpsynth-1", "dpsynth-1000", "raw", "latency")
LABELS = {
    "faust-table": "(a) Faust agent, table[cell] += 1 on a RocksDB table",
    "faust-noop": "(b) Faust agent that does nothing",
    "dpsynth-1": "(c) dpsynth, 1 record per message",
    "dpsynth-1000": "(d) dpsynth, 1000 records per message",
    "raw": "(e) raw confluent-kafka consumption",
    "latency": "release at t = records, no backlog (last tick produced to an idle worker)",
}


# -- children (each variant in its own process) ------------------------------------------------


def _write_result(path: str, result: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    Path(tmp).write_text(json.dumps(result))
    os.replace(tmp, path)


def _child_faust(mode: str, bootstrap: str, topic: str, n: int, data_dir: str, out: str) -> None:
    """(a) or (b): a Faust worker that counts ``n`` records, writes its timings, and exits."""
    import faust
    import msgpack
    from faust.worker import Worker

    group = f"bench-{mode}-{uuid.uuid4().hex[:10]}"
    app = faust.App(
        group, broker=f"kafka://{bootstrap}", autodiscover=False, datadir=data_dir,
        store="rocksdb://" if mode == "faust-table" else "memory://",
        consumer_auto_offset_reset="earliest", web_enabled=False, table_standby_replicas=0,
    )
    source = app.topic(topic, key_type=bytes, value_type=bytes,
                       key_serializer="raw", value_serializer="raw")
    state: dict[str, float] = {"n": 0}

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        if any(tp.topic == topic for tp in assigned):
            state.setdefault("assigned", time.time())

    def finish() -> None:
        state["last"] = time.time()
        _write_result(out, {**state, "records": n, "group": group})
        os._exit(0)

    if mode == "faust-table":
        table = app.Table("cells", default=int, partitions=1, key_type=int, value_type=int)

        async def count(stream: Any) -> None:
            async for value in stream:
                if not state["n"]:
                    state["first"] = time.time()
                record = msgpack.unpackb(value)
                cell = (min(int(record["x"] * GRID), GRID - 1) * GRID
                        + min(int(record["y"] * GRID), GRID - 1))
                table[cell] += 1
                state["n"] += 1
                if state["n"] >= n:
                    finish()

        app.agent(source, name="bench.count", concurrency=1)(count)
    else:

        async def noop(stream: Any) -> None:
            async for _event in stream.events():
                if not state["n"]:
                    state["first"] = time.time()
                state["n"] += 1
                if state["n"] >= n:
                    finish()

        app.agent(source, name="bench.noop", concurrency=1)(noop)
    Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False).execute_from_commandline()


def _child_raw(bootstrap: str, topic: str, n: int, out: str) -> None:
    """(e): confluent-kafka consumes ``n`` messages of ``topic`` (fresh group, from the start)."""
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex[:10]}",
        "auto.offset.reset": "earliest", "enable.auto.commit": True,
    })
    consumer.subscribe([topic])
    subscribed = time.time()
    count, first = 0, 0.0
    while count < n:
        batch = consumer.consume(10_000, timeout=1.0)
        for message in batch:
            if message.error() is None:
                if not count:
                    first = time.time()
                count += 1
    last = time.time()
    consumer.close()
    _write_result(out, {"subscribed": subscribed, "first": first, "last": last, "n": count,
                        "records": n})


def _child_main(argv: list[str]) -> None:
    kind, bootstrap, topic, n, data_dir, out = argv
    if kind == "raw":
        _child_raw(bootstrap, topic, int(n), out)
    else:
        _child_faust(kind, bootstrap, topic, int(n), data_dir, out)


# -- parent -------------------------------------------------------------------------------------


def _run_child(kind: str, bootstrap: str, topic: str, n: int, work: Path,
               timeout_s: float) -> dict[str, Any]:
    out = work / f"{kind}.json"
    data_dir = work / f"{kind}-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = work / f"{kind}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "benchmarks.kafka", kind, bootstrap, topic, str(n),
             str(data_dir), str(out)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
            raise TimeoutError(
                f"{kind} did not finish in {timeout_s:.0f} s; see {log_path}"
            ) from None
    if not out.exists():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{kind} exited ({proc.returncode}) without a result:\n{tail}")
    result = json.loads(out.read_text())
    result["elapsed_s"] = result["last"] - result["first"]
    result["records_per_s"] = n / result["elapsed_s"]
    start = result.get("assigned", result.get("subscribed"))
    if start is not None:  # Faust: partition assigned; raw: subscribe() called
        result["records_per_s_from_assignment"] = n / (result["last"] - start)
    return result


def _run_dpsynth(bootstrap: str, topic: str, n: int, n_messages: int, work: Path, name: str,
                 timeout_s: float, latency_at: int | None = None) -> dict[str, Any]:
    """The worker on a pre-produced ``topic``; rates from /metrics polls (see the module doc)."""
    tag = uuid.uuid4().hex[:8]
    topics = Topics(topic, f"bench-{name}-{tag}-synthetic", f"bench-{name}-{tag}-dead")
    create_topics(bootstrap, {topics.output: 1, topics.dead_letter: 1})
    env = worker_env(
        bootstrap, topics, write_schema(work / "schema.json"), work / f"{name}-data",
        release_every=RELEASE_EVERY, max_depth=20, state_sync="true", run_id=f"bench-{tag}",
        group_id=f"bench-{name}-{tag}", log_level="warn",
    )
    releases = n // RELEASE_EVERY
    with WorkerProcess(env, work / f"{name}.log") as worker:
        worker.wait_ready(timeout_s=120)
        assigned = first = None
        prev: dict[str, dict[str, float]] = {}
        latency = None
        deadline = time.monotonic() + timeout_s
        while True:
            m = worker.metrics()
            now = time.time()
            if m and "0" in m.get("dpsynth_t", {}):
                if assigned is None:
                    assigned = now
                if first is None and m["dpsynth_t"]["0"] > 0:
                    first = now
                if latency_at is not None and latency is None and prev:
                    before, after = prev["dpsynth_t"]["0"], m["dpsynth_t"]["0"]
                    acked_before = prev.get("dpsynth_releases_total", {}).get("0", 0)
                    acked_after = m.get("dpsynth_releases_total", {}).get("0", 0)
                    if acked_after * RELEASE_EVERY >= latency_at > acked_before * RELEASE_EVERY:
                        key = "dpsynth_release_latency_seconds"
                        dsum = (m[f"{key}_sum"]["0"]
                                - prev.get(f"{key}_sum", {}).get("0", 0.0))
                        dcount = (m[f"{key}_count"]["0"]
                                  - prev.get(f"{key}_count", {}).get("0", 0.0))
                        latency = {"seconds": dsum / max(dcount, 1), "releases_in_poll":
                                   dcount, "t_before": before, "t_after": after}
                prev = m
                if (m["dpsynth_t"]["0"] >= n
                        and m.get("dpsynth_releases_total", {}).get("0", 0) >= releases
                        and m.get("dpsynth_watermark", {}).get("0") == n_messages - 1):
                    last = now
                    break
            if not worker.alive:
                raise RuntimeError(f"worker exited:\n{worker.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not done in {timeout_s:.0f} s:\n{worker.log_tail()}")
            time.sleep(POLL_S)
    assert assigned is not None and first is not None
    key = "dpsynth_release_latency_seconds"
    out: dict[str, Any] = {
        "assigned": assigned, "first_t_seen": first, "last": last,
        "elapsed_s": last - assigned, "records_per_s": n / (last - assigned),
        "records_per_s_from_first_t_seen": n / (last - first),
        "releases": m["dpsynth_releases_total"]["0"],
        "release_latency_mean_s": m[f"{key}_sum"]["0"] / m[f"{key}_count"]["0"],
        "state_bytes": m.get("dpsynth_state_bytes", {}).get("0"),
        "state_commits": m.get("dpsynth_state_commits_total", {}).get("0"),
    }
    if latency_at is not None:
        out["release_latency_at"] = {"t": latency_at, **(latency or {})}
    return out


def _run_latency(bootstrap: str, records: int, work: Path, timeout_s: float) -> dict[str, Any]:
    """Release latency at t = ``records`` without a backlog.

    The worker first catches up with ``records − 10^4`` pre-produced records (in 1000-record
    messages) and goes idle; then the last tick's 10 messages are produced and timed from the
    ``produce`` call to the release acknowledged (``/metrics`` poll), and by the worker's own
    histogram (arrival of the tick's last record → release acknowledged).
    """
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"bench-latency-{tag}-raw", f"bench-latency-{tag}-synthetic",
                    f"bench-latency-{tag}-dead")
    create_topics(bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    rng = np.random.default_rng(1)  # noqa: TID251 - benchmark input points, not noise
    points = rng.random((records, 2))
    head = records - RELEASE_EVERY

    def messages(lo: int, hi: int) -> Iterator[tuple[int, bytes]]:
        for i in range(lo, hi, PER_MESSAGE):
            yield 0, encode_records(records_of(points[i:i + PER_MESSAGE]))

    produce_messages(bootstrap, topics.input, messages(0, head), linger_ms=20)
    env = worker_env(
        bootstrap, topics, write_schema(work / "schema.json"), work / "latency-data",
        release_every=RELEASE_EVERY, max_depth=20, state_sync="true", run_id=f"bench-{tag}",
        group_id=f"bench-latency-{tag}", log_level="warn",
    )
    key = "dpsynth_release_latency_seconds"
    with WorkerProcess(env, work / "latency.log") as worker:
        worker.wait_ready(timeout_s=120)
        worker.wait_for(lambda m: m.get("dpsynth_releases_total", {}).get("0", 0)
                        >= head // RELEASE_EVERY
                        and m.get("dpsynth_t", {}).get("0") == head, timeout_s=timeout_s)
        time.sleep(1.0)
        before = worker.metrics()
        start = time.time()
        produce_messages(bootstrap, topics.input, messages(head, records), linger_ms=0)
        produced = time.time()
        deadline = time.monotonic() + timeout_s
        while True:
            after = worker.metrics()
            if after.get("dpsynth_releases_total", {}).get("0", 0) >= records // RELEASE_EVERY:
                done = time.time()
                break
            if time.monotonic() > deadline or not worker.alive:
                raise TimeoutError(f"no release at t = {records}:\n{worker.log_tail()}")
            time.sleep(POLL_S)
    dcount = after[f"{key}_count"]["0"] - before[f"{key}_count"]["0"]
    return {
        "t": records,
        "produce_to_release_s": done - start,
        "produce_call_s": produced - start,
        "worker_latency_s": (after[f"{key}_sum"]["0"] - before[f"{key}_sum"]["0"])
        / max(dcount, 1),
        "releases_in_window": dcount,
        "state_bytes": after.get("dpsynth_state_bytes", {}).get("0"),
    }


def _produce_inputs(bootstrap: str, messages: int, records: int,
                    seed: int = 0) -> tuple[str, str, dict[str, float]]:
    tag = uuid.uuid4().hex[:8]
    single, batched = f"bench-single-{tag}", f"bench-batched-{tag}"
    create_topics(bootstrap, {single: 1, batched: 1})
    rng = np.random.default_rng(seed)  # noqa: TID251 - benchmark input points, not noise
    timings = {}
    start = time.monotonic()
    points = records_of(rng.random((messages, 2)))
    produce_messages(bootstrap, single, ((0, encode_records(r)) for r in points), linger_ms=20)
    timings["produce_single_s"] = time.monotonic() - start
    start = time.monotonic()
    big = rng.random((records, 2))
    produce_messages(bootstrap, batched, (
        (0, encode_records(records_of(big[i:i + PER_MESSAGE])))
        for i in range(0, records, PER_MESSAGE)
    ), linger_ms=20)
    timings["produce_batched_s"] = time.monotonic() - start
    return single, batched, timings


def run_kafka_bench(bootstrap: str, messages: int = 200_000, records: int = 1_000_000, *,
                    variants: tuple[str, ...] = VARIANTS, timeout_s: float = 900.0,
                    work_dir: Path | None = None) -> dict[str, Any]:
    """One run of every variant against ``bootstrap``; returns rates, ratios and latencies."""
    if messages % RELEASE_EVERY or records % RELEASE_EVERY:
        raise ValueError(f"messages and records must be multiples of {RELEASE_EVERY}")
    load_start = os.getloadavg()
    started = dt.datetime.now(dt.UTC)
    with contextlib.ExitStack() as stack:
        if work_dir is None:
            work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bk-")))
        needs_inputs = any(v != "latency" for v in variants)
        single, batched, produce = (_produce_inputs(bootstrap, messages, records)
                                    if needs_inputs else ("", "", {}))
        results: dict[str, Any] = {}
        for variant in variants:
            if variant == "latency":
                results[variant] = _run_latency(bootstrap, records, work_dir, timeout_s)
                click.echo(f"latency: {results[variant]}", err=True)
                continue
            if variant in ("faust-table", "faust-noop", "raw"):
                results[variant] = _run_child(variant, bootstrap, single, messages, work_dir,
                                              timeout_s)
            elif variant == "dpsynth-1":
                results[variant] = _run_dpsynth(bootstrap, single, messages, messages, work_dir,
                                                variant, timeout_s)
            else:
                results[variant] = _run_dpsynth(
                    bootstrap, batched, records, records // PER_MESSAGE, work_dir, variant,
                    timeout_s, latency_at=min(records, 1_000_000),
                )
            click.echo(f"{variant}: {results[variant]['records_per_s']:,.0f} records/s",
                       err=True)
    rated = {k: v for k, v in results.items() if k != "latency"}
    rate = {k: v["records_per_s"] for k, v in rated.items()}
    # same basis for every variant: from partition assignment (raw: from subscribe())
    rate_assigned = {k: v.get("records_per_s_from_assignment", v["records_per_s"])
                     for k, v in rated.items()}
    ratios, ratios_assigned = {}, {}
    for name, (a, b) in {"c/b": ("dpsynth-1", "faust-noop"), "c/a": ("dpsynth-1", "faust-table"),
                         "e/b": ("raw", "faust-noop")}.items():
        if a in rate and b in rate:
            ratios[name] = rate[a] / rate[b]
            ratios_assigned[name] = rate_assigned[a] / rate_assigned[b]
    latency = results.get("dpsynth-1000", {}).get("release_latency_at", {}).get("seconds")
    goals = {
        "c >= 0.8 b": ratios.get("c/b", 0) >= 0.8 if "c/b" in ratios else None,
        "c >= 3 a": ratios.get("c/a", 0) >= 3 if "c/a" in ratios else None,
        "d >= 5e5": rate["dpsynth-1000"] >= 5e5 if "dpsynth-1000" in rate else None,
        "latency at 1e6 < 2 s (backlog)": latency < 2 if latency is not None else None,
    }
    idle = results.get("latency", {}).get("produce_to_release_s")
    if idle is not None:
        goals["latency at 1e6 < 2 s (no backlog)"] = idle < 2
    return {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "load_start": load_start, "load_end": os.getloadavg(),
        "messages": messages, "records": records, "release_every": RELEASE_EVERY,
        "epsilon": EPSILON, "d": 2, "produce": produce, "results": results,
        "records_per_s": rate, "records_per_s_from_assignment": rate_assigned,
        "ratios": ratios, "ratios_from_assignment": ratios_assigned, "goals": goals,
    }


def format_table(report: dict[str, Any]) -> str:
    """The Markdown table of a report."""
    rows = ["| variant | records | elapsed | records/s | records/s from assignment |",
            "|---|---:|---:|---:|---:|"]
    for variant, r in report["results"].items():
        if variant == "latency":
            continue
        n = report["records"] if variant == "dpsynth-1000" else report["messages"]
        rows.append(f"| {LABELS[variant]} | {n:,} | {r['elapsed_s']:.2f} s | "
                    f"{r['records_per_s']:,.0f} | "
                    f"{report['records_per_s_from_assignment'][variant]:,.0f} |")
    lines = ["\n".join(rows), ""]
    for name, value in report["ratios"].items():
        lines.append(f"{name} = {value:.2f} (from assignment: "
                     f"{report['ratios_from_assignment'][name]:.2f})")
    d = report["results"].get("dpsynth-1000", {})
    if d.get("release_latency_at"):
        lat = d["release_latency_at"]
        seconds = lat.get("seconds", float("nan"))
        lines.append(f"release latency at t = {lat['t']:,}: {seconds:.3f} s"
                     f" (mean over the whole run {d['release_latency_mean_s']:.3f} s)")
    idle = report["results"].get("latency")
    if idle:
        lines.append(f"release at t = {idle['t']:,} without backlog: produce → release "
                     f"acknowledged {idle['produce_to_release_s']:.3f} s (worker histogram "
                     f"{idle['worker_latency_s']:.3f} s)")
    lines.append(f"goals: {report['goals']}")
    return "\n".join(lines)


@contextlib.contextmanager
def bench_broker(bootstrap: str | None, kafka_dir: str) -> Iterator[str]:
    """``bootstrap`` if given, else a local broker in ``kafka_dir`` for the benchmark's run."""
    if bootstrap:
        yield bootstrap
        return
    with broker.local_broker(Path(kafka_dir)) as address:
        yield address


@click.command("bench-kafka")
@click.option("--bootstrap", help="A running broker (host:port); default: start "
              "deploy/kafka-local.sh's broker in --kafka-dir and stop it at the end.")
@click.option("--messages", type=click.IntRange(min=RELEASE_EVERY), default=200_000,
              show_default=True, help="Messages of one record for (a), (b), (c), (e).")
@click.option("--records", type=click.IntRange(min=RELEASE_EVERY), default=1_000_000,
              show_default=True, help="Records in 1000-record messages for (d).")
@click.option("--kafka-dir", default=DEFAULT_KAFKA_DIR, show_default=True,
              help="Run directory of the broker started here (DPSYNTH_KAFKA_DIR).")
@click.option("--variant", "variants", multiple=True, type=click.Choice(VARIANTS),
              help="Run only these variants (repeatable); default: all.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the full report as JSON.")
def bench_kafka(bootstrap: str | None, messages: int, records: int, kafka_dir: str,
                variants: tuple[str, ...], json_path: Path | None) -> None:
    """Records/s from produce to release: Faust baselines, dpsynth, raw consumption."""
    with bench_broker(bootstrap, kafka_dir) as address:
        report = run_kafka_bench(address, messages, records, variants=variants or VARIANTS)
    click.echo(format_table(report))
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    _child_main(sys.argv[1:])
