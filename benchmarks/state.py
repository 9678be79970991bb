"""``python -m benchmarks state``: restoring a partition without its disk, and state bytes written.

Layer: benchmark (a real broker: ``--bootstrap``, else a local one; the worker as subprocesses).

1. **Restore time vs input history.** For each N in ``--history`` (10⁴, 10⁵, 10⁶ records,
   Gowalla NYC in 1000-record messages as in ``benchmarks kafka``, the worker's defaults): a
   worker counts them and stops; its data directory is deleted; a second worker (same run and
   group) gets the partition without local state and restores it **from the state topic**; its
   data directory is deleted again and a third, with ``DPSYNTH_CHANGELOG=false``, rebuilds it
   **by replaying the input** from offset 0. Times are the workers' own histograms: loading the
   partition when it is assigned (``dpsynth_state_load_seconds``: for the first path the state
   topic's read, the rebuild from base and deltas and the install) and the replay
   (``dpsynth_replay_seconds``); one more message is produced before each restart so that the
   replay path sees the gap.
2. **State bytes per record (a short soak).** A worker fed at a steady ``--rate`` records/s in
   100-record messages for ``--soak-s`` seconds (release every 1000, defaults otherwise), then
   the same with the worker of ``--baseline`` (before deltas: a commit wrote every changed
   256 KiB chunk): bytes written to RocksDB, and to the state topic, per record counted.

.. code-block:: console

    $ DPSYNTH_DATA_DIR=/path/to/shared/data python -m benchmarks state --bootstrap HOST:PORT
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import click
import msgpack

from benchmarks.kafka import (
    BASELINE_REV,
    DEFAULT_KAFKA_DIR,
    PER_MESSAGE,
    _worker_env,
    baseline_tree,
    bench_broker,
    gowalla_records,
)
from dpsynth.testing.kafka import Topics, WorkerProcess, create_topics, produce_messages

HISTORY = (10_000, 100_000, 1_000_000)


def _histogram_sum(metrics: dict[str, dict[str, float]], name: str) -> float:
    return metrics.get(f"dpsynth_{name}_sum", {}).get("0", 0.0)


def _wait(worker: WorkerProcess, n: int, timeout_s: float,
          offset: int = -1) -> dict[str, dict[str, float]]:
    """Until t ≥ n and the state is committed through ``offset``."""
    return worker.wait_for(lambda m: m.get("dpsynth_t", {}).get("0", 0) >= n
                           and m.get("dpsynth_watermark", {}).get("0", -1) >= offset,
                           timeout_s=timeout_s)


def restore_times(bootstrap: str, n: int, work: Path, timeout_s: float) -> dict[str, Any]:
    """Both restore paths for a history of ``n`` records (module docstring)."""
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"bench-state-{tag}-raw", f"bench-state-{tag}-synthetic",
                    f"bench-state-{tag}-dead")
    create_topics(bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    packer = msgpack.Packer(use_bin_type=True)
    records = gowalla_records(n + 2)
    produce_messages(bootstrap, topics.input, (
        (0, packer.pack(records[i:i + PER_MESSAGE])) for i in range(0, n, PER_MESSAGE)),
        linger_ms=20)
    data = work / f"state-{tag}"
    env = {**_worker_env(bootstrap, topics, data, tag, "state"), "DPSYNTH_TICK_SECONDS": "0"}
    out: dict[str, Any] = {"records": n}
    with WorkerProcess(env, work / f"state-{tag}-a.log") as worker:
        start = time.monotonic()
        metrics = _wait(worker, n, timeout_s, n // PER_MESSAGE - 1)
        out["count_s"] = time.monotonic() - start
        out["state_bytes"] = metrics.get("dpsynth_state_bytes", {}).get("0")
    for path, extra, value in (("state_topic", {}, n + 1),
                               ("replay", {"DPSYNTH_CHANGELOG": "false"}, n + 2)):
        shutil.rmtree(data)
        produce_messages(bootstrap, topics.input, [(0, packer.pack([records[value - 1]]))])
        with WorkerProcess({**env, **extra}, work / f"state-{tag}-{path}.log") as worker:
            metrics = _wait(worker, value, timeout_s, n // PER_MESSAGE + value - n - 1)
        out[path] = {
            "load_s": _histogram_sum(metrics, "state_load_seconds"),
            "topic_read_s": _histogram_sum(metrics, "state_restore_seconds"),
            "replay_s": _histogram_sum(metrics, "replay_seconds"),
            "messages_replayed": metrics.get("dpsynth_messages_replayed_total", {}).get("0", 0),
        }
        out[path]["total_s"] = out[path]["load_s"] + out[path]["replay_s"]
    return out


def soak(bootstrap: str, rate: int, seconds: float, work: Path, timeout_s: float,
         pythonpath: Path | None = None) -> dict[str, Any]:
    """State bytes written per record at a steady rate (module docstring)."""
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"bench-soak-{tag}-raw", f"bench-soak-{tag}-synthetic",
                    f"bench-soak-{tag}-dead")
    create_topics(bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    n = int(rate * seconds) // 100 * 100
    records = gowalla_records(n)
    env = _worker_env(bootstrap, topics, work / f"soak-{tag}", tag, "soak")
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)

    def feed() -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "linger.ms": 5})
        packer = msgpack.Packer(use_bin_type=True)
        start = time.monotonic()
        for k, i in enumerate(range(0, n, 100)):
            producer.produce(topics.input, packer.pack(records[i:i + 100]), partition=0)
            producer.poll(0)
            time.sleep(max(0.0, start + (k + 1) * 100 / rate - time.monotonic()))
        producer.flush(60)

    with WorkerProcess(env, work / f"soak-{tag}.log") as worker:
        worker.wait_for(lambda m: "0" in m.get("dpsynth_t", {}), timeout_s=120)
        feeder = threading.Thread(target=feed)
        feeder.start()
        feeder.join()
        metrics = _wait(worker, n, timeout_s)
        worker.wait_for(lambda m: m.get("dpsynth_watermark", {}).get("0", -1) >= n // 100 - 1,
                        timeout_s=timeout_s)  # the idle commit
        metrics = worker.metrics()

    def get(name: str) -> float:
        return metrics.get(f"dpsynth_{name}", {}).get("0", 0.0)

    local, topic = get("state_bytes_written_total"), get("state_topic_bytes_written_total")
    return {"records": n, "rate": rate, "seconds": seconds, "commits": get("state_commits_total"),
            "state_bytes": get("state_bytes"), "local_bytes": local, "topic_bytes": topic,
            "local_bytes_per_record": local / n, "topic_bytes_per_record": topic / n,
            "local_bytes_per_commit": local / max(get("state_commits_total"), 1),
            "releases": get("releases_total")}


def format_report(report: dict[str, Any]) -> str:
    """Markdown tables of a report."""
    rows = ["| history (records) | state | restore from the state topic | of which reading "
            "the topic | replay of the input | messages replayed |",
            "|---:|---:|---:|---:|---:|---:|"]
    for r in report["restore"]:
        topic, replay = r["state_topic"], r["replay"]
        rows.append(f"| {r['records']:,} | {r['state_bytes'] or 0:,.0f} B | "
                    f"{topic['total_s']:.2f} s | {topic['topic_read_s']:.2f} s | "
                    f"{replay['total_s']:.2f} s | {replay['messages_replayed']:,.0f} |")
    lines = ["\n".join(rows), ""]
    soak_rows = ["| worker | records | commits | state at the end | RocksDB bytes/record | "
                 "state topic bytes/record | RocksDB bytes/commit |",
                 "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in report["soak"].items():
        soak_rows.append(f"| {name} | {s['records']:,} | {s['commits']:.0f} | "
                         f"{s['state_bytes']:,.0f} B | {s['local_bytes_per_record']:,.1f} | "
                         f"{s['topic_bytes_per_record']:,.1f} | "
                         f"{s['local_bytes_per_commit']:,.0f} |")
    lines += ["\n".join(soak_rows), "", f"{report['date']}, load {report['load']}"]
    return "\n".join(lines)


@click.command("state")
@click.option("--bootstrap", help="A running broker (host:port); default: start one.")
@click.option("--kafka-dir", default=DEFAULT_KAFKA_DIR, show_default=True)
@click.option("--history", multiple=True, type=int, help="History lengths (repeatable).")
@click.option("--rate", type=int, default=2000, show_default=True)
@click.option("--soak-s", type=float, default=60.0, show_default=True,
              help="Seconds of the soak (0: no soak).")
@click.option("--baseline", default=BASELINE_REV, show_default=True,
              help="Git revision of the soak's comparison worker (empty: none).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def bench_state(bootstrap: str | None, kafka_dir: str, history: tuple[int, ...], rate: int,
                soak_s: float, baseline: str, json_path: Path | None) -> None:
    """Restore time vs input history (state topic, replay), state bytes written per record."""
    import datetime as dt
    import os

    timeout_s = 1800.0
    report: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                              "restore": [], "soak": {}}
    load = [os.getloadavg()[0]]
    with bench_broker(bootstrap, kafka_dir) as address, tempfile.TemporaryDirectory(
            prefix="bs-") as tmp:
        work = Path(tmp)
        for n in history or HISTORY:
            report["restore"].append(restore_times(address, n, work, timeout_s))
            click.echo(json.dumps(report["restore"][-1]), err=True)
        if soak_s > 0:
            report["soak"]["deltas (issue 28)"] = soak(address, rate, soak_s, work, timeout_s)
        if soak_s > 0 and baseline:
            report["soak"][f"chunks ({baseline})"] = soak(
                address, rate, soak_s, work, timeout_s, baseline_tree(baseline, work))
    load.append(os.getloadavg()[0])
    report["load"] = f"{load[0]:.1f} → {load[1]:.1f}"
    click.echo(format_report(report))
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2))
