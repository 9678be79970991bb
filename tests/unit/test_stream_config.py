"""Worker configuration: every bad setting is refused at start, naming the variable and the fix;
the noise key never appears in a repr, a log summary or an error message."""

from __future__ import annotations

import json
import pickle

import pytest

from dpsynth.errors import ConfigError
from dpsynth.stream.settings import NoiseKey, WorkerConfig, bootstrap_of, load_config

KEY = "ab" * 32


@pytest.fixture
def env(tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"version": 1, "columns": [
        {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": -5, "upper": 5}]}))
    return {
        "DPSYNTH_BROKER": "kafka://127.0.0.1:9092",
        "DPSYNTH_SCHEMA_FILE": str(schema),
        "DPSYNTH_EPSILON": "1.0",
        "DPSYNTH_NOISE_KEY": KEY,
        "DPSYNTH_DATA_DIR": str(tmp_path / "data"),
    }


def test_minimal_environment_gives_documented_defaults(env):
    config = load_config(env)
    assert isinstance(config, WorkerConfig)
    assert (config.d, config.epsilon, config.release_every, config.max_depth) == (2, 1.0, 1000, 20)
    assert config.input_topic == "dpsynth-raw-events"
    assert config.output_topic == "dpsynth-synthetic"
    assert config.dead_letter_topic == "dpsynth-dead-letter"
    assert config.run_id == f"run-{config.noise_key.fingerprint}"
    assert config.app_id == f"dpsynth-{config.run_id}"
    assert config.bootstrap_servers() == "127.0.0.1:9092"
    assert config.faust_broker() == "kafka://127.0.0.1:9092"
    assert config.noise_key.reveal() == bytes.fromhex(KEY)


@pytest.mark.parametrize(("name", "fragment"), [
    ("DPSYNTH_NOISE_KEY", "DPSYNTH_NOISE_KEY is not set: set it to 64 hex characters, or set "
                          "DPSYNTH_NOISE_KEY_FILE"),
    ("DPSYNTH_BROKER", "DPSYNTH_BROKER is not set"),
    ("DPSYNTH_SCHEMA_FILE", "DPSYNTH_SCHEMA_FILE is not set"),
    ("DPSYNTH_EPSILON", "DPSYNTH_EPSILON is not set"),
])
def test_a_missing_required_variable_is_named_with_its_fix(env, name, fragment):
    del env[name]
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        load_config(env)


@pytest.mark.parametrize(("name", "value", "fragment"), [
    ("DPSYNTH_EPSILON", "0", "DPSYNTH_EPSILON ('0') must be a finite number > 0"),
    ("DPSYNTH_EPSILON", "nan", "DPSYNTH_EPSILON ('nan') must be a finite number"),
    ("DPSYNTH_RELEASE_EVERY", "0", "DPSYNTH_RELEASE_EVERY ('0') must be an integer >= 1"),
    ("DPSYNTH_RELEASE_EVERY", "ten", "DPSYNTH_RELEASE_EVERY ('ten') must be an integer"),
    ("DPSYNTH_MAX_DEPTH", "64", "DPSYNTH_MAX_DEPTH ('64') must be an integer in [0, 63]"),
    ("DPSYNTH_WEB_PORT", "70000", "DPSYNTH_WEB_PORT ('70000') must be an integer in [1, 65535]"),
    ("DPSYNTH_INPUT_TOPIC", "raw events!", "DPSYNTH_INPUT_TOPIC ('raw events!') must be a Kafka"),
    ("DPSYNTH_OUTPUT_TOPIC", "dpsynth-raw-events", "must be different topics"),
    ("DPSYNTH_RUN_ID", "a/b", "DPSYNTH_RUN_ID ('a/b') must be 1-200 characters"),
    ("DPSYNTH_STATE_SYNC", "maybe", "DPSYNTH_STATE_SYNC ('maybe') must be true or false"),
    ("DPSYNTH_LOG_LEVEL", "warning", "DPSYNTH_LOG_LEVEL ('warning') must be one of"),
    ("DPSYNTH_CRASH_AT", "mid_tick", "DPSYNTH_CRASH_AT ('mid_tick') must be POINT:N"),
    ("DPSYNTH_CRASH_AT", "nowhere:1", "DPSYNTH_CRASH_AT ('nowhere:1') must be POINT:N"),
    ("DPSYNTH_SCHEMA_FILE", "/no/such/schema.json", "DPSYNTH_SCHEMA_FILE ('/no/such/schema.json')"
                                                    " cannot be read"),
])
def test_an_invalid_value_is_named_with_the_rule(env, name, value, fragment):
    env[name] = value
    with pytest.raises(ConfigError) as info:
        load_config(env)
    assert fragment in str(info.value)


def test_crash_point_is_parsed(env):
    env["DPSYNTH_CRASH_AT"] = "after_release_produced:3"
    assert load_config(env).crash_at == ("after_release_produced", 3)


@pytest.mark.parametrize("bad_key", ["ab" * 31, "zz" * 32, "ab" * 33, "secret-key"])
def test_a_malformed_key_is_refused_without_echoing_it(env, bad_key):
    env["DPSYNTH_NOISE_KEY"] = bad_key
    with pytest.raises(ConfigError) as info:
        load_config(env)
    assert "DPSYNTH_NOISE_KEY must hold exactly 64 hex characters" in str(info.value)
    assert bad_key not in str(info.value)
    assert bad_key[:8] not in str(info.value)


def test_the_key_never_appears_in_repr_str_summary_or_pickle(env):
    config = load_config(env)
    for text in (repr(config), str(config), repr(config.noise_key), str(config.noise_key),
                 json.dumps(config.public_summary())):
        assert KEY not in text and KEY.upper() not in text
        assert bytes.fromhex(KEY).hex() not in text
    assert config.public_summary()["key_fingerprint"] == config.noise_key.fingerprint
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(config.noise_key)


def test_key_from_a_file_and_not_both(env, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    del env["DPSYNTH_NOISE_KEY"]
    env["DPSYNTH_NOISE_KEY_FILE"] = str(key_file)
    assert load_config(env).noise_key.reveal() == bytes.fromhex(KEY)
    env["DPSYNTH_NOISE_KEY"] = KEY
    with pytest.raises(ConfigError, match="both set: keep exactly one"):
        load_config(env)
    del env["DPSYNTH_NOISE_KEY"]
    env["DPSYNTH_NOISE_KEY_FILE"] = str(tmp_path / "missing")
    with pytest.raises(ConfigError, match="DPSYNTH_NOISE_KEY_FILE .* cannot be read"):
        load_config(env)


def test_config_file_json_and_toml_with_environment_override(env, tmp_path):
    json_file = tmp_path / "worker.json"
    json_file.write_text(json.dumps({"epsilon": 0.5, "release_every": 250,
                                     "input_topic": "raw-from-file"}))
    env["DPSYNTH_CONFIG_FILE"] = str(json_file)
    del env["DPSYNTH_EPSILON"]
    config = load_config(env)
    assert (config.epsilon, config.release_every, config.input_topic) == (0.5, 250, "raw-from-file")
    env["DPSYNTH_RELEASE_EVERY"] = "500"  # the environment wins
    assert load_config(env).release_every == 500

    toml_file = tmp_path / "worker.toml"
    toml_file.write_text('epsilon = 2.0\nmax_depth = 10\nstate_sync = false\n')
    env["DPSYNTH_CONFIG_FILE"] = str(toml_file)
    config = load_config(env)
    assert (config.epsilon, config.max_depth, config.state_sync) == (2.0, 10, False)


@pytest.mark.parametrize(("content", "fragment"), [
    ('{"epsilon": 1, "epsilom": 2}', "unknown setting 'epsilom'"),
    ('{"noise_key": "' + KEY + '"}', "must not hold the noise key"),
    ("[1, 2]", "must hold one object/table of settings"),
    ("{not json", "must be valid JSON"),
])
def test_a_bad_config_file_is_refused(env, tmp_path, content, fragment):
    path = tmp_path / "worker.json"
    path.write_text(content)
    env["DPSYNTH_CONFIG_FILE"] = str(path)
    with pytest.raises(ConfigError) as info:
        load_config(env)
    assert fragment in str(info.value)
    assert KEY not in str(info.value)


def test_bootstrap_forms():
    assert bootstrap_of("kafka://a:1;kafka://b:2") == "a:1,b:2"
    assert bootstrap_of("a:1,b:2") == "a:1,b:2"
    assert repr(NoiseKey(bytes(32))).startswith("NoiseKey(fingerprint=")


def test_worker_command_exits_1_with_the_fix(env, monkeypatch):
    from click.testing import CliRunner

    from dpsynth.cli.worker import worker

    for name in list(env):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        if name != "DPSYNTH_NOISE_KEY":
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("DPSYNTH_NOISE_KEY", raising=False)
    monkeypatch.delenv("DPSYNTH_NOISE_KEY_FILE", raising=False)
    result = CliRunner().invoke(worker, [])
    assert result.exit_code == 1
    assert "DPSYNTH_NOISE_KEY is not set: set it to 64 hex characters" in result.output


def test_a_data_directory_is_held_by_one_worker(env):
    from dpsynth.cli.worker import lock_data_dir

    config = load_config(env)
    held = lock_data_dir(config)
    try:
        with pytest.raises(ConfigError, match="is in use by another worker"):
            lock_data_dir(config)
    finally:
        held.close()
    lock_data_dir(config).close()  # free again


def test_mechanism_setting_and_a_retired_name(env):
    from dpsynth.online.mechanism import MECHANISMS

    assert load_config(env).mechanism == "auto"  # the synthesizer's default
    for name in MECHANISMS:
        env["DPSYNTH_MECHANISM"] = name
        assert load_config(env).mechanism == name
    del env["DPSYNTH_MECHANISM"]
    env["DPSYNTH_SCHEDULE"] = "paper"  # its name before 0.1: refused, naming the new one
    with pytest.raises(ConfigError, match="DPSYNTH_SCHEDULE is now DPSYNTH_MECHANISM"):
        load_config(env)
    env["DPSYNTH_MECHANISM"] = "greedy"
    with pytest.raises(ConfigError, match="DPSYNTH_MECHANISM \\('greedy'\\) must be one of"):
        load_config({k: v for k, v in env.items() if k != "DPSYNTH_SCHEDULE"})


def test_neighbours_setting_is_validated_and_bound_to_the_state(env):
    from dpsynth.stream.engines import bound_variable, public_config

    assert load_config(env).neighbours == "replace"
    assert public_config(load_config(env))["neighbours"] == "replace"
    env["DPSYNTH_NEIGHBOURS"] = "add_remove"  # steps end at tick markers only (P11)
    config = load_config(env)
    assert config.mechanism == "auto" and config.tick_seconds == 60
    assert public_config(config)["neighbours"] == "add_remove"
    assert bound_variable("neighbours") == "DPSYNTH_NEIGHBOURS"
    assert bound_variable("schedule") == "DPSYNTH_MECHANISM"
    env["DPSYNTH_MECHANISM"] = "paper"  # time levels count records: refused
    with pytest.raises(ConfigError, match="needs mechanism='guided' or 'adaptive'"):
        load_config(env)
    del env["DPSYNTH_MECHANISM"]
    env["DPSYNTH_RELEASE_EVERY"] = "500"  # steps of N records would reveal the count
    with pytest.raises(ConfigError, match="Unset DPSYNTH_RELEASE_EVERY"):
        load_config(env)
    del env["DPSYNTH_RELEASE_EVERY"]
    env["DPSYNTH_RELEASE_GROWTH"] = "0.1"  # grows steps of N records: refused likewise
    with pytest.raises(ConfigError, match="Unset DPSYNTH_RELEASE_GROWTH"):
        load_config(env)
    del env["DPSYNTH_RELEASE_GROWTH"]
    env["DPSYNTH_TICK_SECONDS"] = "0"  # no marker: no step would ever end
    with pytest.raises(ConfigError, match="DPSYNTH_TICK_SECONDS=60"):
        load_config(env)
    del env["DPSYNTH_TICK_SECONDS"]
    env["DPSYNTH_NEIGHBOURS"] = "user"
    with pytest.raises(ConfigError, match=r"DPSYNTH_NEIGHBOURS \('user'\) must be one of"):
        load_config(env)
