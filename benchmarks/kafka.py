"""``python -m benchmarks kafka``: records/s of the Kafka worker where users are (issue 15).

Layer: adapter (benchmark; confluent-kafka, Faust, subprocesses). One run against a real broker
(``deploy/kafka-local.sh``'s, started and stopped here when no ``--bootstrap`` is given), the
**defaults first** and **real data**: Gowalla NYC check-ins (``DPSYNTH_DATA_DIR``) as
``dpsynth produce --dataset gowalla --schema schemas/example-schema.json`` sends them (lat, lon
in degrees), replayed in time order until the wanted number of records:

1. pre-produce two input topics: ``--messages`` msgpack maps, one record per message (topic A),
   and ``--records`` records in 1000-record msgpack arrays (topic B);
2. run each variant as its own process with a fresh consumer group (and data directory):

   (a) ``dpsynth-1``: ``python -m dpsynth worker`` with its defaults (ε = 1, a release every
       1000 records, default depth and schedule, fsync on commit, tick markers every 60 s) and
       the example schema, on topic A;
   (b) ``dpsynth-1000``: the same worker on topic B;
   (c) ``faust-noop``: a Faust agent that only iterates the events of topic A (what one record
       per message cost through Faust's stream before issue 15);
   (d) ``raw``: a confluent-kafka consumer that consumes topic A (no decoding);
   (e) ``library``: the embedded engine (``OnlineSynthesizer``, the same defaults) on the same
       ``--records`` points in this process, fed 1000 points per call as the worker feeds it,
       every release encoded and dropped (no Kafka, no msgpack input). One ``extend`` of all
       the points returns every release at once, 10³ whole datasets (≈ 1 GB at 10⁶ records)
       held together: in a fresh process their first-touch page faults made it 2.3× slower
       (2.8·10⁵ against 6.4·10⁵ records/s, one run), which is not the worker's work.

   (f) ``dpsynth-1-before`` and (g) ``dpsynth-1000-before``: (a) and (b) run right after them by
       the worker of ``--baseline REV`` (default: the last commit before the release
       transactions, at-least-once delivery and de-duplication by the consumer), extracted with
       ``git archive`` and put first on ``PYTHONPATH``: the cost of the transactions, back to
       back on the same broker and input.

3. records/s = records ÷ (last record processed − partition assigned). The Faust and raw
   children time themselves; the worker's start is the moment its partition shows up in
   ``/metrics`` (assigned, state opened: just *before* the first fetch) and its end the first
   ``/metrics`` poll (every 20 ms) that shows t = all records, the watermark at the last record
   and every release by count delivered: the worker's rates are lower bounds.

   (h) ``dpsynth-1000-tx``: (b) with transactions only (``DPSYNTH_CHANGELOG=false``,
       ``DPSYNTH_LATEST_VIEW=false``): what the state topic and the latest view cost on top.

Ratios printed (same run): (a)/(c), (a)/(d), (b)/(e), (a)/(f), (b)/(g), (h)/(g). Goals (issue 15):
(a) ≥ 2·10⁴ and (b) ≥ 2·10⁵ records/s.

.. code-block:: console

    $ DPSYNTH_DATA_DIR=/path/to/shared/data python -m benchmarks kafka --json bench-kafka.json
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
import msgpack

from dpsynth.testing import broker
from dpsynth.testing.kafka import (
    Topics,
    WorkerProcess,
    create_topics,
    produce_messages,
    worker_env,
)

PER_MESSAGE = 1000
RELEASE_EVERY = 1000  # the worker's default (DPSYNTH_RELEASE_EVERY)
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "example-schema.json"
#: Run directory of the broker this benchmark starts (not the test suite's ``.kafka``).
DEFAULT_KAFKA_DIR = "/tmp/bk-kafka"  # noqa: S108 - a run dir for a local test broker
POLL_S = 0.02
VARIANTS = ("dpsynth-1", "dpsynth-1-before", "dpsynth-1000", "dpsynth-1000-before",
            "dpsynth-1000-tx", "faust-noop", "raw", "library")
LABELS = {
    "dpsynth-1": "(a) dpsynth worker, defaults, 1 record per message",
    "dpsynth-1000": "(b) dpsynth worker, defaults, 1000 records per message",
    "faust-noop": "(c) Faust agent that does nothing, 1 record per message",
    "raw": "(d) raw confluent-kafka consumption, 1 record per message",
    "library": "(e) the embedded engine alone (no Kafka), same records and defaults",
    "dpsynth-1-before": "(f) as (a), the worker of --baseline (before transactions)",
    "dpsynth-1000-before": "(g) as (b), the worker of --baseline (before transactions)",
    "dpsynth-1000-tx": "(h) as (b), transactions only (no state topic, no latest view)",
}
#: What a variant sets beyond the defaults.
VARIANT_ENV = {"dpsynth-1000-tx": {"DPSYNTH_CHANGELOG": "false", "DPSYNTH_LATEST_VIEW": "false"}}
#: The last commit whose worker published without transactions (at-least-once + de-duplication).
BASELINE_REV = "2ff6967"
REPO = Path(__file__).resolve().parents[1]
GOALS = {"dpsynth-1": 2e4, "dpsynth-1000": 2e5}


def gowalla_records(n: int) -> list[dict[str, float]]:
    """``n`` Gowalla check-ins as ``dpsynth produce`` sends them, the data repeated in order."""
    from dpsynth import datasets
    from dpsynth.cli.produce import load_records
    from dpsynth.schema import Schema

    if not datasets.gowalla_path().is_file():
        raise click.UsageError(f"Gowalla is missing at {datasets.gowalla_path()}: set "
                               "DPSYNTH_DATA_DIR to the shared data folder")
    base = load_records(None, "gowalla", None, 0, Schema.from_json_file(SCHEMA_FILE)).records
    return [base[i % len(base)] for i in range(n)]


# -- children (each variant in its own process) ------------------------------------------------


def _write_result(path: str, result: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    Path(tmp).write_text(json.dumps(result))
    os.replace(tmp, path)


def _child_faust(bootstrap: str, topic: str, n: int, data_dir: str, out: str) -> None:
    """(c): a Faust worker that iterates ``n`` events, writes its timings, and exits."""
    import faust
    from faust.worker import Worker

    group = f"bench-faust-noop-{uuid.uuid4().hex[:10]}"
    app = faust.App(group, broker=f"kafka://{bootstrap}", autodiscover=False, datadir=data_dir,
                    store="memory://", consumer_auto_offset_reset="earliest", web_enabled=False,
                    table_standby_replicas=0)
    source = app.topic(topic, key_type=bytes, value_type=bytes,
                       key_serializer="raw", value_serializer="raw")
    state: dict[str, float] = {"n": 0}

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        if any(tp.topic == topic for tp in assigned):
            state.setdefault("assigned", time.time())

    async def noop(stream: Any) -> None:
        async for _event in stream.events():
            if not state["n"]:
                state["first"] = time.time()
            state["n"] += 1
            if state["n"] >= n:
                state["last"] = time.time()
                _write_result(out, {**state, "records": n, "group": group})
                os._exit(0)

    app.agent(source, name="bench.noop", concurrency=1)(noop)
    Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False).execute_from_commandline()


def _child_raw(bootstrap: str, topic: str, n: int, out: str) -> None:
    """(d): confluent-kafka consumes ``n`` messages of ``topic`` (fresh group, from the start)."""
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex[:10]}",
        "auto.offset.reset": "earliest", "enable.auto.commit": True,
    })
    consumer.subscribe([topic])
    subscribed = time.time()
    count, first = 0, 0.0
    while count < n:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is None:
                if not count:
                    first = time.time()
                count += 1
    last = time.time()
    consumer.close()
    _write_result(out, {"assigned": subscribed, "first": first, "last": last, "n": count,
                        "records": n})


def _child_main(argv: list[str]) -> None:
    kind, bootstrap, topic, n, data_dir, out = argv
    if kind == "raw":
        _child_raw(bootstrap, topic, int(n), out)
    else:
        _child_faust(bootstrap, topic, int(n), data_dir, out)


# -- parent -------------------------------------------------------------------------------------


def _run_child(kind: str, bootstrap: str, topic: str, n: int, work: Path,
               timeout_s: float) -> dict[str, Any]:
    out = work / f"{kind}.json"
    out.unlink(missing_ok=True)  # a result of an earlier repeat is not this run's
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
            raise TimeoutError(f"{kind} did not finish in {timeout_s:.0f} s; see {log_path}"
                               ) from None
    if not out.exists():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{kind} exited ({proc.returncode}) without a result:\n{tail}")
    result = json.loads(out.read_text())
    result["elapsed_s"] = result["last"] - result["assigned"]
    result["records_per_s"] = n / result["elapsed_s"]
    return result


def _worker_env(bootstrap: str, topics: Topics, data_dir: Path, tag: str,
                name: str) -> dict[str, str]:
    """The worker's defaults: only what a deployment must set, plus a local web port."""
    env = worker_env(bootstrap, topics, SCHEMA_FILE, data_dir, run_id=f"bench-{tag}",
                     group_id=f"bench-{name}-{tag}", log_level="warn")
    for test_setting in ("DPSYNTH_MAX_DEPTH", "DPSYNTH_STATE_SYNC", "DPSYNTH_SESSION_TIMEOUT_S"):
        env.pop(test_setting)  # tests shorten these; the benchmark runs the defaults
    return env


def baseline_tree(rev: str, work: Path) -> Path:
    """The ``operators`` folder of ``rev`` (``git archive``), for ``PYTHONPATH``."""
    import io
    import shutil
    import tarfile

    target = work / f"baseline-{rev}"
    if not (target / "operators").is_dir():
        git = shutil.which("git")
        if git is None:
            raise click.UsageError("the -before variants need git (and a checkout)")
        archive = subprocess.run(  # noqa: S603 - git on our own repository
            [git, "-C", str(REPO), "archive", rev, "operators"], capture_output=True,
            check=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(target, filter="data")
    return target / "operators"


def _run_dpsynth(bootstrap: str, topic: str, n: int, n_messages: int, work: Path, name: str,
                 timeout_s: float, pythonpath: Path | None = None,
                 extra: dict[str, str] | None = None) -> dict[str, Any]:
    """The worker on a pre-produced ``topic``; rates from /metrics polls (module docstring).
    ``pythonpath``: run the dpsynth found there (a baseline) instead of this one."""
    tag = uuid.uuid4().hex[:8]
    topics = Topics(topic, f"bench-{name}-{tag}-synthetic", f"bench-{name}-{tag}-dead")
    create_topics(bootstrap, {topics.output: 1, topics.dead_letter: 1})
    releases = n // RELEASE_EVERY
    env = {**_worker_env(bootstrap, topics, work / f"{name}-data", tag, name), **(extra or {})}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    with WorkerProcess(env, work / f"{name}.log") as worker:
        worker.wait_ready(timeout_s=120)
        assigned = None
        deadline = time.monotonic() + timeout_s
        while True:
            m = worker.metrics()
            now = time.time()
            if m and "0" in m.get("dpsynth_t", {}):
                assigned = assigned or now
                if (m["dpsynth_t"]["0"] >= n
                        and m.get("dpsynth_releases_total", {}).get("0", 0) >= releases
                        and m.get("dpsynth_watermark", {}).get("0", -1) >= n_messages - 1):
                    break
            if not worker.alive:
                raise RuntimeError(f"worker exited:\n{worker.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not done in {timeout_s:.0f} s:\n{worker.log_tail()}")
            time.sleep(POLL_S)
    assert assigned is not None
    key = "dpsynth_release_latency_seconds"
    return {
        "assigned": assigned, "last": now, "elapsed_s": now - assigned,
        "records_per_s": n / (now - assigned), "releases": m["dpsynth_releases_total"]["0"],
        "release_latency_mean_s": m[f"{key}_sum"]["0"] / m[f"{key}_count"]["0"],
        "state_bytes": m.get("dpsynth_state_bytes", {}).get("0"),
        "state_commits": m.get("dpsynth_state_commits_total", {}).get("0"),
        "state_bytes_written": m.get("dpsynth_state_bytes_written_total", {}).get("0"),
        "transactions": m.get("dpsynth_transactions_total", {}).get("0"),
    }


def _run_library(records: list[dict[str, float]]) -> dict[str, Any]:
    """(e): the embedded engine with the worker's defaults on the same records, in process."""
    from dpsynth.release import encode_release
    from dpsynth.schema import Schema
    from dpsynth.settings import SynthesisSettings

    schema = Schema.from_json_file(SCHEMA_FILE)
    points, _, _ = schema.split_valid(records)
    synth = SynthesisSettings(epsilon=1.0).synthesizer(schema.d, bytes(range(32)))
    start = time.perf_counter()
    releases = 0
    for first in range(0, len(points), PER_MESSAGE):  # as the worker feeds it: per message,
        for release in synth.extend(points[first:first + PER_MESSAGE]):  # nothing retained
            encode_release(release, run_id="bench", partition=0,
                           sequence=int(release.metadata["sequence"]))
            releases += 1
    elapsed = time.perf_counter() - start
    return {"elapsed_s": elapsed, "records_per_s": len(points) / elapsed, "releases": releases}


def _produce_inputs(bootstrap: str, messages: int, records: int) -> tuple[str, str, dict]:
    tag = uuid.uuid4().hex[:8]
    single, batched = f"bench-single-{tag}", f"bench-batched-{tag}"
    create_topics(bootstrap, {single: 1, batched: 1})
    packer = msgpack.Packer(use_bin_type=True)
    timings = {}
    start = time.monotonic()
    produce_messages(bootstrap, single, ((0, packer.pack(r)) for r in gowalla_records(messages)),
                     linger_ms=20)
    timings["produce_single_s"] = time.monotonic() - start
    start = time.monotonic()
    batch = gowalla_records(records)
    produce_messages(bootstrap, batched, (
        (0, packer.pack(batch[i:i + PER_MESSAGE])) for i in range(0, records, PER_MESSAGE)
    ), linger_ms=20)
    timings["produce_batched_s"] = time.monotonic() - start
    return single, batched, timings


def _run_variant(variant: str, bootstrap: str, single: str, batched: str, messages: int,
                 records: int, faust_messages: int, work_dir: Path, timeout_s: float,
                 baseline: str) -> dict[str, Any]:
    """One run of one variant."""
    before = baseline_tree(baseline, work_dir) if variant.endswith("-before") else None
    name = f"{variant}-{uuid.uuid4().hex[:6]}"
    if variant.startswith("dpsynth-1000"):
        r = _run_dpsynth(bootstrap, batched, records, records // PER_MESSAGE, work_dir, name,
                         timeout_s, before, VARIANT_ENV.get(variant))
    elif variant.startswith("dpsynth-1"):
        r = _run_dpsynth(bootstrap, single, messages, messages, work_dir, name, timeout_s,
                         before)
    elif variant == "faust-noop":
        r = _run_child(variant, bootstrap, single, min(faust_messages, messages), work_dir,
                       timeout_s)
    elif variant == "raw":
        r = _run_child(variant, bootstrap, single, messages, work_dir, timeout_s)
    else:
        r = _run_library(gowalla_records(records))
    r["records"] = (records if variant.startswith("dpsynth-1000") or variant == "library"
                    else min(faust_messages, messages) if variant == "faust-noop" else messages)
    return r


def run_kafka_bench(bootstrap: str, messages: int = 1_000_000, records: int = 2_000_000, *,
                    faust_messages: int = 200_000, variants: tuple[str, ...] = VARIANTS,
                    timeout_s: float = 1800.0, work_dir: Path | None = None,
                    baseline: str = BASELINE_REV, repeats: int = 1) -> dict[str, Any]:
    """One run of every variant against ``bootstrap``; returns rates and ratios."""
    if messages % RELEASE_EVERY or records % PER_MESSAGE:
        raise ValueError(f"messages must be a multiple of {RELEASE_EVERY}, records of "
                         f"{PER_MESSAGE}")
    load_start = os.getloadavg()
    started = dt.datetime.now(dt.UTC)
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if work_dir is None:
            work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bk-")))
        single, batched, produce = _produce_inputs(bootstrap, messages, records)
        runs: dict[str, list[dict[str, Any]]] = {}
        chosen = [v for v in VARIANTS if v in variants]
        for round_ in range(repeats):  # odd rounds in reverse: neither side always first
            for variant in chosen if round_ % 2 == 0 else chosen[::-1]:
                r = _run_variant(variant, bootstrap, single, batched, messages, records,
                                 faust_messages, work_dir, timeout_s, baseline)
                runs.setdefault(variant, []).append(r)
                click.echo(f"{variant}: {r['records_per_s']:,.0f} records/s", err=True)
        for variant, done in runs.items():  # the median run of each variant
            done.sort(key=lambda r: r["records_per_s"])
            results[variant] = {**done[len(done) // 2],
                                "runs_records_per_s": [r["records_per_s"] for r in done]}
    rate = {k: v["records_per_s"] for k, v in results.items()}
    ratios = {}
    for name, (a, b) in {"(a)/(c)": ("dpsynth-1", "faust-noop"), "(a)/(d)": ("dpsynth-1", "raw"),
                         "(b)/(e)": ("dpsynth-1000", "library"),
                         "(a)/(f)": ("dpsynth-1", "dpsynth-1-before"),
                         "(b)/(g)": ("dpsynth-1000", "dpsynth-1000-before"),
                         "(h)/(g)": ("dpsynth-1000-tx", "dpsynth-1000-before")}.items():
        if a in rate and b in rate:
            ratios[name] = rate[a] / rate[b]
    goals = {f"{k} >= {v:.0e}": rate[k] >= v for k, v in GOALS.items() if k in rate}
    return {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"), "load_start": load_start,
        "load_end": os.getloadavg(), "messages": messages, "records": records,
        "faust_messages": min(faust_messages, messages), "data": "Gowalla NYC (lat, lon), "
        "repeated in time order", "produce": produce, "results": results, "baseline": baseline,
        "repeats": repeats,
        "records_per_s": rate, "ratios": ratios, "goals": goals,
    }


def format_table(report: dict[str, Any]) -> str:
    """The Markdown table of a report, the defaults first."""
    rows = ["| variant | records | elapsed | records/s |", "|---|---:|---:|---:|"]
    for variant, r in report["results"].items():
        rows.append(f"| {LABELS[variant]} | {r['records']:,} | {r['elapsed_s']:.2f} s | "
                    f"{r['records_per_s']:,.0f} |")
    lines = ["\n".join(rows), ""]
    lines += [f"{name} = {value:.2f}" for name, value in report["ratios"].items()]
    for variant in ("dpsynth-1", "dpsynth-1-before", "dpsynth-1000", "dpsynth-1000-before",
                    "dpsynth-1000-tx"):
        r = report["results"].get(variant)
        if r:
            lines.append(f"{variant}: {r['releases']:.0f} releases, mean release latency "
                         f"{r['release_latency_mean_s']:.3f} s, {r['state_commits']:.0f} "
                         f"state commits, {r.get('transactions') or 0:.0f} transactions, "
                         f"state {r['state_bytes'] or 0:,.0f} bytes")
    lines.append(f"goals: {report['goals']}")
    lines.append(f"load {report['load_start'][0]:.2f} → {report['load_end'][0]:.2f}; "
                 f"{report['date']}")
    return "\n".join(lines)


@contextlib.contextmanager
def bench_broker(bootstrap: str | None, kafka_dir: str) -> Iterator[str]:
    """``bootstrap`` if given, else a local broker in ``kafka_dir`` for the benchmark's run."""
    if bootstrap:
        yield bootstrap
        return
    with broker.local_broker(Path(kafka_dir)) as address:
        yield address


@click.command("kafka")
@click.option("--bootstrap", help="A running broker (host:port); default: start "
              "deploy/kafka-local.sh's broker in --kafka-dir and stop it at the end.")
@click.option("--messages", type=click.IntRange(min=RELEASE_EVERY), default=1_000_000,
              show_default=True, help="One-record messages (Gowalla, repeated) for (a), (d).")
@click.option("--records", type=click.IntRange(min=PER_MESSAGE), default=2_000_000,
              show_default=True, help="Records in 1000-record messages for (b), (e).")
@click.option("--faust-messages", type=click.IntRange(min=1), default=200_000,
              show_default=True, help="The first N one-record messages for (c) (Faust is slow).")
@click.option("--kafka-dir", default=DEFAULT_KAFKA_DIR, show_default=True,
              help="Run directory of the broker started here (DPSYNTH_KAFKA_DIR).")
@click.option("--variant", "variants", multiple=True, type=click.Choice(VARIANTS),
              help="Run only these variants (repeatable); default: all.")
@click.option("--baseline", default=BASELINE_REV, show_default=True,
              help="Git revision of the worker run by the -before variants (git archive).")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs of every variant, alternating the order; the median is reported.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the full report as JSON.")
def bench_kafka(bootstrap: str | None, messages: int, records: int, faust_messages: int,
                kafka_dir: str, variants: tuple[str, ...], baseline: str, repeats: int,
                json_path: Path | None) -> None:
    """Records/s of the worker with its defaults on Gowalla, next to Faust and raw consumption,
    and next to the worker before transactions (--baseline)."""
    with bench_broker(bootstrap, kafka_dir) as address:
        report = run_kafka_bench(address, messages, records, faust_messages=faust_messages,
                                 variants=variants or VARIANTS, baseline=baseline,
                                 repeats=repeats)
    click.echo(format_table(report))
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    _child_main(sys.argv[1:])
