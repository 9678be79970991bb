"""``dpsynth topics create`` on a real broker, and the worker's missing-topic error (issue 15)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.cli.worker import check_topics
from dpsynth.errors import ConfigError
from dpsynth.stream.settings import load_config
from dpsynth.testing.kafka import unique_topics, worker_env, write_schema

pytestmark = pytest.mark.kafka


def _describe(bootstrap: str, names: list[str]) -> dict[str, tuple[int, dict[str, str]]]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=30).topics
    resources = [ConfigResource("topic", n) for n in names]
    configs = {r.name: {k: v.value for k, v in f.result(30).items()}
               for r, f in admin.describe_configs(resources).items()}
    return {n: (len(topics[n].partitions), configs[n]) for n in names}


def test_create_makes_the_topics_with_limits_that_fit_releases(kafka_bootstrap):
    t = unique_topics("topics")
    latest = f"{t.output}-latest"
    state = f"{t.input}-state"
    args = ["topics", "create", "--bootstrap", kafka_bootstrap, "--input-topic", t.input,
            "--output-topic", t.output, "--dead-letter-topic", t.dead_letter,
            "--partitions", "3", "--release-max-record-bytes", "1000000",
            "--output-retention-bytes", str(2**30), "--state-topic", state]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.output.count("created") == 5
    described = _describe(kafka_bootstrap, [t.input, t.output, t.dead_letter, latest, state])
    assert [described[n][0] for n in (t.input, t.output, t.dead_letter, latest, state)] == [
        3, 3, 1, 3, 3]
    assert described[state][1]["cleanup.policy"] == "compact"
    raw, synthetic, dead, view = (described[n][1]
                                  for n in (t.input, t.output, t.dead_letter, latest))
    assert raw["retention.ms"] == "-1"
    assert int(synthetic["max.message.bytes"]) >= 1_000_000 + 64 * 1024
    assert synthetic["retention.ms"] == str(7 * 24 * 3600 * 1000)  # the history: a week
    assert synthetic["retention.bytes"] == str(2**30)
    assert dead["retention.ms"] == str(7 * 24 * 3600 * 1000)
    assert raw["min.insync.replicas"] == "1"  # one broker: replication 1
    assert view["cleanup.policy"] == "compact" and view["retention.ms"] == "-1"
    assert view["max.message.bytes"] == synthetic["max.message.bytes"]
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and again.output.count("left as it is") == 5


def test_create_refuses_more_replicas_than_brokers(kafka_bootstrap):
    t = unique_topics("topics-rf")
    result = CliRunner().invoke(main, ["topics", "create", "--bootstrap", kafka_bootstrap,
                                       "--input-topic", t.input, "--replication-factor", "5"])
    assert result.exit_code == 2 and "exceeds" in result.output


def test_the_worker_names_the_command_when_a_topic_is_missing(kafka_bootstrap, tmp_path):
    t = unique_topics("topics-missing")
    config = load_config(worker_env(kafka_bootstrap, t, write_schema(tmp_path / "s.json"),
                                    tmp_path / "data"))
    with pytest.raises(ConfigError, match="dpsynth topics create"):
        check_topics(config)


def test_the_broker_script_runs_kafkas_topic_tool(kafka_bootstrap):
    import shutil
    import subprocess

    from dpsynth.testing.broker import missing_prerequisites, script_path

    if missing_prerequisites() or shutil.which("mvn") is None:
        pytest.skip(f"kafka-local.sh cannot run here: {missing_prerequisites() or ['mvn']}")
    t = unique_topics("topics-tool")
    assert CliRunner().invoke(main, ["topics", "create", "--bootstrap", kafka_bootstrap,
                                     "--input-topic", t.input, "--output-topic", t.output,
                                     "--dead-letter-topic", t.dead_letter]).exit_code == 0
    proc = subprocess.run(  # noqa: S603 - the packaged script, fixed arguments
        [shutil.which("bash") or "/bin/bash", str(script_path()), "tool", "TopicCommand",
         "--bootstrap-server",
         kafka_bootstrap, "--describe", "--topic", t.input],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"Topic: {t.input}" in proc.stdout and "retention.ms=-1" in proc.stdout
