"""The tabular engine under the worker's commit protocol, without a broker (``DPSYNTH_ENGINE``).

A memory sink and a real RocksDB store; crashes raise instead of SIGKILL, and a restart is a new
processor on the same store fed again from the last acknowledged offset, as Kafka would. Under
add/remove (the tabular default) steps end at the tick markers between the messages (P11);
the expected releases are the embedded synthesizer's over the same messages.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("rocksdict")

from dpsynth.errors import ConfigError  # noqa: E402
from dpsynth.stream.codecs import decode_dead_letter  # noqa: E402
from dpsynth.stream.crash import CrashPoints  # noqa: E402
from dpsynth.stream.processor import InputMessage, PartitionProcessor  # noqa: E402
from dpsynth.stream.settings import load_config  # noqa: E402
from dpsynth.stream.store import PartitionStore  # noqa: E402
from dpsynth.tabular.domain import Domain  # noqa: E402
from dpsynth.testing.kafka import TEST_KEY_HEX, encode_records  # noqa: E402
from tests.support.embedded import MemorySink, crash_then_restart  # noqa: E402
from tests.support.markers import embedded_tabular_from_input, marker  # noqa: E402
from tests.support.tabular import (  # noqa: E402
    SMALL_DOMAIN,
    check_tabular_against_embedded,
    embedded_tabular_release_records,
    write_domain,
)

RELEASE_EVERY = 200  # replacement only
PER_MESSAGE = 70  # not a divisor of RELEASE_EVERY: batches end mid-step
MARKER_EVERY = 3  # a tick marker after every third message of records
DOMAIN = Domain.from_dict(SMALL_DOMAIN)


class Crash(Exception):
    """Stands in for SIGKILL."""


def _env(tmp_path, **extra):
    env = {
        "DPSYNTH_BROKER": "127.0.0.1:9", "DPSYNTH_ENGINE": "tabular",
        "DPSYNTH_DOMAIN_FILE": str(write_domain(tmp_path / "domain.json")),
        "DPSYNTH_EPSILON": "1.0", "DPSYNTH_NOISE_KEY": TEST_KEY_HEX,
        "DPSYNTH_RUN_ID": "test-run", "DPSYNTH_DATA_DIR": str(tmp_path / "data"),
        "DPSYNTH_RELEASE_LINGER_S": "0", "DPSYNTH_CHECKPOINT_INTERVAL_S": "3600",
        "DPSYNTH_STATE_COMMIT_INTERVAL_S": "0",  # a state commit with every release
    }
    env.update(extra)
    return env


@pytest.fixture
def config(tmp_path):
    return load_config(_env(tmp_path))


def _codes(n, seed):
    rng = np.random.default_rng(seed)
    first = rng.integers(0, DOMAIN.sizes[0], n)
    cols = [first] + [np.where(rng.random(n) < 0.7, first % s, rng.integers(0, s, n))
                      for s in DOMAIN.sizes[1:]]
    return np.stack(cols, axis=1).astype(np.int64)


def _messages(codes, partition=0):
    """Messages of PER_MESSAGE records, a tick marker after every MARKER_EVERY of them."""
    values = []
    for k, i in enumerate(range(0, len(codes), PER_MESSAGE)):
        values.append(encode_records(DOMAIN.decode(codes[i:i + PER_MESSAGE])))
        if k % MARKER_EVERY == MARKER_EVERY - 1:
            values.append(marker(partition, 60_000 * (k + 1)))
    return [InputMessage(offset=k, value=v) for k, v in enumerate(values)]


def _expected(messages, partition=0):
    per_sequence = embedded_tabular_from_input(
        [m.value for m in messages], DOMAIN, epsilon=1.0, release_every=1000,
        partition=partition)
    return {(partition, s): r for s, r in per_sequence.items()}


def _processor(config, sink, crash_at=None, partition=0, replay=None):
    store = PartitionStore(config.data_dir / f"p{partition}", partition=partition,
                           run_id=config.run_id, chunk_bytes=16384, sync=False)

    def crash(point):
        raise Crash(point)

    return PartitionProcessor(config, partition, store=store, sink=sink,
                              crash=CrashPoints(crash_at, action=crash), replay=replay)


def _run(proc, messages, start, batch=3):
    acked = start - 1
    for i in range(start, len(messages), batch):
        acked = proc.process(messages[i:i + batch])
    return acked


# -- configuration -------------------------------------------------------------------------


def test_tabular_settings_are_read_and_defaulted(tmp_path):
    config = load_config(_env(tmp_path, DPSYNTH_TABULAR_WORKLOADS_PER_STEP="3"))
    assert config.engine == "tabular" and config.schema is None
    assert config.tabular.domain == DOMAIN and config.d == 4
    assert config.tabular.workloads_per_step == 3
    default = load_config(_env(tmp_path))
    assert default.tabular.workloads_per_step is None  # the library picks max(1, round(2ε))
    assert default.tabular_synthesizer(0).k == 2
    assert config.tabular.mechanism in ("proposed", "baseline")
    summary = config.public_summary()
    assert summary["tabular"]["domain_digest"] == DOMAIN.digest()
    assert TEST_KEY_HEX not in repr(summary)


@pytest.mark.parametrize(("change", "fragment"), [
    ({"DPSYNTH_DOMAIN_FILE": None}, "DPSYNTH_DOMAIN_FILE is not set: DPSYNTH_ENGINE=tabular"),
    ({"DPSYNTH_DOMAIN_FILE": "/nonexistent/d.json"}, "DPSYNTH_DOMAIN_FILE .* fix the path"),
    ({"DPSYNTH_SCHEMA_FILE": "s.json"}, "unset DPSYNTH_SCHEMA_FILE"),
    ({"DPSYNTH_ENGINE": "trees"}, "DPSYNTH_ENGINE .* must be one of \\('points', 'tabular'\\)"),
    ({"DPSYNTH_TABULAR_MECHANISM": "mwem"}, "DPSYNTH_TABULAR_MECHANISM .* must be one of"),
    ({"DPSYNTH_TABULAR_METHOD": "baseline"}, "DPSYNTH_TABULAR_METHOD is now "
                                             "DPSYNTH_TABULAR_MECHANISM"),  # renamed
    ({"DPSYNTH_TABULAR_COUNTER": "tree"}, "DPSYNTH_TABULAR_COUNTER .* must be one of"),
    ({"DPSYNTH_TABULAR_WORKLOADS_PER_STEP": "0"}, "DPSYNTH_TABULAR_WORKLOADS_PER_STEP"),
    ({"DPSYNTH_ENGINE": None}, "set DPSYNTH_ENGINE=tabular .* or unset DPSYNTH_DOMAIN_FILE"),
    ({"DPSYNTH_RELEASE_GROWTH": "0.1"}, "DPSYNTH_RELEASE_GROWTH grows the point engine's"),
])
def test_a_bad_tabular_setting_is_refused_with_its_fix(tmp_path, change, fragment):
    env = _env(tmp_path)
    for name, value in change.items():
        if value is None:
            env.pop(name)
        else:
            env[name] = value
    with pytest.raises(ConfigError, match=fragment):
        load_config(env)


def test_tabular_settings_from_a_toml_file_and_the_environment_wins(tmp_path):
    domain = write_domain(tmp_path / "domain.json")
    toml = tmp_path / "worker.toml"
    toml.write_text(f'engine = "tabular"\ndomain_file = "{domain}"\n'
                    'tabular_mechanism = "baseline"\ntabular_counter = "block"\n'
                    'tabular_workloads_per_step = 2\n')
    env = {k: v for k, v in _env(tmp_path).items()
           if k not in ("DPSYNTH_ENGINE", "DPSYNTH_DOMAIN_FILE")}
    config = load_config({**env, "DPSYNTH_CONFIG_FILE": str(toml),
                          "DPSYNTH_TABULAR_WORKLOADS_PER_STEP": "4"})
    assert config.engine == "tabular"
    assert (config.tabular.mechanism, config.tabular.counter) == ("baseline", "block")
    assert config.tabular.workloads_per_step == 4


def test_a_bad_domain_file_is_refused_naming_the_variable(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "attributes": []}')
    with pytest.raises(ConfigError, match="DPSYNTH_DOMAIN_FILE"):
        load_config(_env(tmp_path, DPSYNTH_DOMAIN_FILE=str(bad)))


# -- the commit protocol -------------------------------------------------------------------


def test_uninterrupted_run_equals_the_embedded_synthesizer(config):
    codes = _codes(1400, 1)
    messages = _messages(codes)
    sink = MemorySink()
    proc = _processor(config, sink)
    last_marker = max(m.offset for m in messages if b"__dpsynth_tick__" in m.value)
    assert _run(proc, messages, 0) == last_marker  # the open step waits for a checkpoint
    assert proc.commit() == len(messages) - 1
    assert proc.synth.t == len(codes)  # markers are never counted as records
    stats = check_tabular_against_embedded(sink.records(config.output_topic), _expected(messages),
                                           "test-run")
    assert (stats["releases"], stats["duplicates"]) == (20 // MARKER_EVERY, 0)
    assert proc.metrics.get("tick_markers", 0) == 20 // MARKER_EVERY
    proc.close()


def test_under_replace_steps_end_every_n_records_or_at_a_marker(tmp_path):
    config = load_config(_env(tmp_path, DPSYNTH_NEIGHBOURS="replace",
                              DPSYNTH_RELEASE_EVERY=str(RELEASE_EVERY)))
    codes = _codes(1400, 1)
    messages = _messages(codes)
    sink = MemorySink()
    proc = _processor(config, sink)
    _run(proc, messages, 0)
    expected = {(0, s): r for s, r in embedded_tabular_from_input(
        [m.value for m in messages], DOMAIN, epsilon=1.0, release_every=RELEASE_EVERY,
        neighbours="replace").items()}
    stats = check_tabular_against_embedded(sink.records(config.output_topic), expected,
                                           "test-run")
    assert stats["releases"] > len(codes) // RELEASE_EVERY  # the markers added steps
    without_markers = embedded_tabular_release_records(  # every N records only
        codes, domain=DOMAIN, epsilon=1.0, release_every=RELEASE_EVERY, run_id="test-run",
        partition=0, neighbours="replace")
    assert len(without_markers) == len(codes) // RELEASE_EVERY
    proc.close()


def test_partition_one_equals_its_embedded_run_and_draws_its_own_noise(config):
    codes = _codes(400, 2)
    sink = MemorySink()
    proc = _processor(config, sink, partition=1)
    _run(proc, _messages(codes, 1), 0)
    records = sink.records(config.output_topic)
    check_tabular_against_embedded(records, _expected(_messages(codes, 1), 1), "test-run")
    # same data, same key, partition 0: other noise, so other synthetic rows
    assert (_expected(_messages(codes), 0)[(0, 1)][1:]
            != _expected(_messages(codes, 1), 1)[(1, 1)][1:])
    proc.close()


@pytest.mark.parametrize(("point", "visit"), [
    ("mid_tick", 2),
    ("mid_release", 2),
    ("after_release_produced", 2),
    ("after_transaction_commit", 2),
    ("after_state_commit", 3),
])
def test_crash_at_each_step_then_restart_continues_identically(config, point, visit):
    codes = _codes(1400, 3)
    messages = _messages(codes)
    sink = MemorySink()
    restarted = crash_then_restart(
        lambda sink, crash_at, replay: _processor(config, sink, crash_at, replay=replay), sink,
        messages, crash_at=(point, visit), crash=Crash, batch=3)
    assert restarted.synth.t == len(codes)  # no record lost, none counted twice
    restarted.commit()
    stats = check_tabular_against_embedded(sink.records(config.output_topic),
                                           _expected(messages), "test-run")
    assert stats["duplicates"] == 0  # read_committed: every release once
    if point in ("mid_release", "after_release_produced"):
        assert len(sink.uncommitted(config.output_topic)) > stats["records"]  # aborted ones
    restarted.close()


def test_a_partition_without_state_is_rebuilt_by_replay(config):
    codes = _codes(1400, 8)
    messages = _messages(codes)
    sink = MemorySink()
    first = _processor(config, sink)
    _run(first, messages[:8], 0)  # the first owner publishes and commits its offsets
    first.close()
    shutil.rmtree(config.data_dir / "p0")  # the next owner has no local state
    start = sink.group_offset
    assert start is not None and start > 0
    calls = []

    def replay(partition, begin, end):
        calls.append((partition, begin, end))
        return iter(messages[begin:end])

    store = PartitionStore(config.data_dir / "p0", partition=0, run_id=config.run_id, sync=False)
    proc = PartitionProcessor(config, 0, store=store, sink=sink, replay=replay)
    _run(proc, messages, start)  # Kafka delivers from the committed offset
    assert calls == [(0, 0, start)]
    assert proc.synth.t == len(codes)
    stats = check_tabular_against_embedded(sink.records(config.output_topic),
                                           _expected(messages), "test-run")
    assert stats["duplicates"] == 0  # the replayed releases were not published again
    proc.close()


def test_records_outside_the_domain_are_dead_lettered_without_their_value(config):
    good = DOMAIN.decode(_codes(300, 4))
    values = [
        encode_records(good[:150]),
        encode_records([{"colour": "purple-secret", "member": "no", "age4": 1, "score5": 2},
                        good[150]]),
        encode_records({"colour": "red", "member": "yes", "age4": 9, "score5": 0}),
        encode_records({"colour": "red", "age4": 1, "score5": 0}),
        b"\xc1",
        encode_records(good[151:]),
    ]
    messages = [InputMessage(offset=i, value=v) for i, v in enumerate(values)]
    sink = MemorySink()
    proc = _processor(config, sink)
    proc.process(messages)
    proc.commit()
    assert proc.synth.t == 300
    letters = [decode_dead_letter(v) for _, v in sink.delivered[config.dead_letter_topic]]
    assert [d["offset"] for d in letters] == [1, 2, 3, 4]
    assert letters[0]["rejects"] == [[0, "attribute 'colour': unknown category"]]
    assert letters[0]["n_records"] == 2 and letters[0]["length"] == len(values[1])
    assert "age4" in letters[1]["reason"] and "9" not in letters[1]["reason"]
    assert letters[2]["reason"] == "attribute 'member': missing"
    assert letters[3]["rejects"][0][0] == -1
    assert all("purple-secret" not in str(d["rejects"]) for d in letters)
    assert proc.metrics.get("dead_lettered_records", 0) == 4
    proc.close()


@pytest.mark.parametrize(("variable", "value", "fragment"), [
    ("DPSYNTH_EPSILON", "0.5", "DPSYNTH_EPSILON differs"),
    ("DPSYNTH_NOISE_KEY", "77" * 32, r"DPSYNTH_NOISE_KEY \(fingerprint\) differs"),
    ("DPSYNTH_TABULAR_COUNTER", "unbounded_block", "DPSYNTH_TABULAR_COUNTER differs"),
])
def test_changed_parameters_refuse_the_stored_state(tmp_path, config, variable, value, fragment):
    proc = _processor(config, MemorySink())
    proc.process(_messages(_codes(300, 5)))
    proc.close()
    changed = load_config(_env(tmp_path, **{variable: value}))
    with pytest.raises(ConfigError, match=f"{fragment}.*Restore the previous setting"):
        _processor(changed, MemorySink())


def test_a_changed_domain_refuses_the_stored_state(tmp_path, config):
    proc = _processor(config, MemorySink())
    proc.process(_messages(_codes(300, 6)))
    proc.close()
    other = {**SMALL_DOMAIN, "attributes": [*SMALL_DOMAIN["attributes"][:3],
                                            {"name": "score5", "size": 6}]}
    changed = load_config(_env(tmp_path, DPSYNTH_DOMAIN_FILE=str(
        write_domain(tmp_path / "other.json", other))))
    with pytest.raises(ConfigError, match="DPSYNTH_DOMAIN_FILE differs"):
        _processor(changed, MemorySink())


def test_switching_engine_on_a_data_dir_is_refused(tmp_path, config):
    proc = _processor(config, MemorySink())
    proc.process(_messages(_codes(300, 7)))
    proc.close()
    schema = tmp_path / "schema.json"
    schema.write_text('{"version": 1, "columns": [{"name": "x", "lower": 0, "upper": 1}]}')
    env = {k: v for k, v in _env(tmp_path).items()
           if k not in ("DPSYNTH_ENGINE", "DPSYNTH_DOMAIN_FILE")}
    points = load_config({**env, "DPSYNTH_SCHEMA_FILE": str(schema)})
    with pytest.raises(ConfigError, match="set DPSYNTH_ENGINE=tabular"):
        _processor(points, MemorySink())
