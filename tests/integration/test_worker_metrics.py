"""The worker's metrics and probes on a real broker (issue 15).

- A partition's series leave a worker's ``/metrics`` when the partition is revoked, so a sum over
  workers counts every partition once (it double-counted before: the old owner kept exporting).
- ``dpsynth_lag_messages`` shows a backlog while the worker catches up and 0 once it has;
  ``dpsynth_tick_age_seconds`` and the release latency histogram are exported per partition.
- ``/healthz`` (liveness) and ``/readyz`` (assignment received) answer 200 on a worker that
  processes or idles with no lag; the stuck cases are unit-tested (:mod:`dpsynth.stream.health`).
"""

from __future__ import annotations

import time
import urllib.request

import numpy as np
import pytest

from dpsynth.testing.kafka import (
    WorkerProcess,
    create_topics,
    encode_records,
    produce_messages,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)

pytestmark = pytest.mark.kafka


def _get(worker: WorkerProcess, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(  # noqa: S310 - fixed local http URL
                f"http://127.0.0.1:{worker.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _produce(bootstrap: str, topic: str, partitions: int, messages: int, per: int) -> None:
    rng = np.random.default_rng(5)
    produce_messages(bootstrap, topic, (
        (i % partitions, encode_records(records_of(rng.random((per, 2)))))
        for i in range(messages)), linger_ms=20)


@pytest.mark.slow
def test_a_revoked_partition_leaves_the_old_owners_metrics(kafka_bootstrap, tmp_path):
    topics = unique_topics("metrics-revoke")
    create_topics(kafka_bootstrap, {topics.input: 2, topics.output: 2, topics.dead_letter: 1})
    schema = write_schema(tmp_path / "schema.json")
    env_a = worker_env(kafka_bootstrap, topics, schema, tmp_path / "a", tick_seconds=0)
    env_b = worker_env(kafka_bootstrap, topics, schema, tmp_path / "b", tick_seconds=0)
    _produce(kafka_bootstrap, topics.input, 2, 40, 100)  # 2000 records per partition
    with WorkerProcess(env_a, tmp_path / "a.log") as a:
        a.wait_for(lambda m: m.get("dpsynth_t", {}) == {"0": 2000.0, "1": 2000.0})
        assert _get(a, "/readyz")[0] == 200
        with WorkerProcess(env_b, tmp_path / "b.log") as b:
            b.wait_for(lambda m: len(m.get("dpsynth_t", {})) == 1, timeout_s=120)
            a.wait_for(lambda m: len(m.get("dpsynth_t", {})) == 1, timeout_s=120)
            # one more message per partition: B rebuilds the moved one by replay (t = 2100)
            _produce(kafka_bootstrap, topics.input, 2, 2, 100)
            b.wait_for(lambda m: list(m["dpsynth_t"].values()) == [2100.0], timeout_s=120)
            a.wait_for(lambda m: list(m["dpsynth_t"].values()) == [2100.0], timeout_s=120)
            ma, mb = a.metrics(), b.metrics()
            assert set(ma["dpsynth_t"]) | set(mb["dpsynth_t"]) == {"0", "1"}
            for name in ("dpsynth_t", "dpsynth_watermark", "dpsynth_records_in_total",
                         "dpsynth_lag_messages", "dpsynth_tick_age_seconds"):
                assert not set(ma.get(name, {})) & set(mb.get(name, {})), name
            assert sum(ma["dpsynth_t"].values()) + sum(mb["dpsynth_t"].values()) == 4200
            assert _get(b, "/readyz")[0] == 200 and _get(b, "/healthz")[0] == 200


@pytest.mark.slow
def test_lag_while_catching_up_then_zero_and_the_probes_answer(kafka_bootstrap, tmp_path):
    topics = unique_topics("metrics-lag")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    _produce(kafka_bootstrap, topics.input, 1, 400, 1000)
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", tick_seconds=0, batch_max_events=4)
    lags = []
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            m = worker.metrics()
            lags += list(m.get("dpsynth_lag_messages", {}).values())
            if m.get("dpsynth_watermark", {}).get("0") == 399:
                break
            time.sleep(0.02)
        m = worker.wait_for(lambda m: m.get("dpsynth_lag_messages", {}).get("0") == 0)
        assert max(lags) > 0, "the backlog never showed as lag"
        assert m["dpsynth_t"]["0"] == 400_000
        assert m["dpsynth_release_latency_seconds_count"]["0"] == 400
        assert m["dpsynth_tick_age_seconds"]["0"] >= 0  # exported (its size is the clock's)
        status, text = _get(worker, "/healthz")
        assert (status, text.strip()) == (200, "ok")
        assert _get(worker, "/readyz") == (200, "ok\n")
        metrics_text = _get(worker, "/metrics")[1]
        assert "# TYPE dpsynth_lag_messages gauge" in metrics_text
