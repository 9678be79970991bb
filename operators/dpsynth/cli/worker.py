"""``dpsynth worker``: start the Faust worker from the ``DPSYNTH_*`` configuration.

Layer: adapter. Also reachable as ``python -m dpsynth worker``.

Example (a local broker from ``deploy/kafka-local.sh start``)::

    export DPSYNTH_BROKER=127.0.0.1:9092 DPSYNTH_SCHEMA_FILE=schema.json DPSYNTH_EPSILON=1
    export DPSYNTH_NOISE_KEY_FILE=/run/secrets/dpsynth-key DPSYNTH_DATA_DIR=/data
    dpsynth worker            # or: python -m dpsynth worker --config worker.toml

Before Faust starts, the command checks the configuration, that the three topics exist (and
creates the latest view's compacted topic when it is missing), that no release of its run id on
the output topic carries another key fingerprint (P13), and that no other worker uses the data
directory (the state topic too: created when missing); every failure prints what to fix and
exits with 1 (a configuration that cannot be used: :mod:`dpsynth.cli.errors`).
"""

from __future__ import annotations

import faulthandler
import fcntl
import logging
import os
import signal
import time
from pathlib import Path
from typing import IO

import click

from dpsynth.cli.errors import InputError
from dpsynth.errors import ConfigError, DpsynthError
from dpsynth.stream.settings import WorkerConfig, load_config

log = logging.getLogger(__name__)


class StartError(InputError):
    """The worker cannot start; the message names the setting and the fix (exit status 1)."""


def check_topics(config: WorkerConfig, timeout_s: float = 20.0) -> dict[str, int]:
    """Partitions of the worker's topics (three, or four with DPSYNTH_POINTS_FORMAT); a
    ConfigError naming the variable of a missing one."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers()})
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise ConfigError(
            f"DPSYNTH_BROKER ({config.broker}) cannot be reached ({e.args[0].str()}); "
            "check the address and that the broker runs"
        ) from None
    out = {}
    points = [("DPSYNTH_POINTS_TOPIC", config.points_topic)] * (config.points_format != "none")
    for variable, topic in (
        ("DPSYNTH_INPUT_TOPIC", config.input_topic),
        ("DPSYNTH_OUTPUT_TOPIC", config.output_topic),
        ("DPSYNTH_DEAD_LETTER_TOPIC", config.dead_letter_topic),
        *points,
    ):
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            raise ConfigError(
                f"{variable} ({topic!r}) does not exist on the broker: create the worker's topics "
                "with `dpsynth topics create --partitions P` (P: one raw-events partition per "
                "worker you plan to run"
                + ("; with DPSYNTH_POINTS_FORMAT set it creates DPSYNTH_POINTS_TOPIC too"
                   if points else "") + "), or fix the name"
            )
        out[topic] = len(info.partitions)
    return out


def with_input_partitions(config: WorkerConfig, partitions: int) -> WorkerConfig:
    """The configuration with the input topic's partition count (privacy unit "user", P15).

    A declared ``DPSYNTH_INPUT_PARTITIONS`` must match the topic: a user's partition is
    murmur2(key) modulo that count, so it may never change during a run.
    """
    if config.privacy_unit != "user":
        return config
    if config.input_partitions and config.input_partitions != partitions:
        raise ConfigError(
            f"DPSYNTH_INPUT_PARTITIONS ({config.input_partitions}) differs from the "
            f"{partitions} partitions of {config.input_topic!r}: under DPSYNTH_PRIVACY_UNIT=user "
            "a user's partition must never change; restore the topic's partition count, or "
            "start a new run (new run id, key and input topic)")
    return config.model_copy(update={"input_partitions": partitions})


def lock_data_dir(config: WorkerConfig) -> IO[str]:
    """Hold an exclusive lock on the data directory for the life of the process."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    handle = open(config.data_dir / "worker.lock", "a+")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(
            f"DPSYNTH_DATA_DIR ({config.data_dir}) is in use by another worker: give every "
            "worker its own data directory (a volume per pod)"
        ) from None
    return handle


def warm_up(config: WorkerConfig) -> None:
    """Compile the numba kernels before consuming, so the first release is not late.

    Uses a dummy key and partition: nothing of it is published or stored. The tabular engine
    has no compiled kernels: nothing to do.
    """
    if config.engine != "points":
        return
    import numpy as np

    warm = config.model_copy(update={"release_every": 64, "max_depth": min(config.max_depth, 8)})
    synth = warm.synthesizer(config.d, bytes(32))
    users = None if synth.users is None else list(range(64))  # compiles the bounds too
    if synth.neighbours == "add_remove":  # steps end only at ticks
        for _ in range(4):
            synth.add(np.full((64, config.d), 0.5), users=users)
            synth.step()
    else:
        for _ in range(4):
            synth.extend(np.full((64, config.d), 0.5), users=users)
    synth.snapshot()


def bind_input(config: WorkerConfig) -> None:
    """Bind the run's key to its input topic, or refuse another input (P13; warned, not fatal,
    where ``DPSYNTH_STATE_DIR`` cannot be written)."""
    from confluent_kafka import KafkaException

    from dpsynth.keybinding import STATE_DIR_ENV, state_dir
    from dpsynth.stream.runcheck import check_run_input, input_topic

    where = Path(config.state_dir) if config.state_dir else state_dir()
    try:
        current = input_topic(config.bootstrap_servers(), config.input_topic)
    except KafkaException as e:
        raise ConfigError(f"DPSYNTH_INPUT_TOPIC ({config.input_topic!r}): its id and offsets "
                          f"could not be read for the key's binding ({e}); check the broker "
                          "(Kafka 2.8 or later) and the topic") from None
    try:
        check_run_input(config.noise_key, config.run_id, current, where)
    except OSError as e:
        log.warning("the key's binding to its input could not be recorded in %s (%s); set %s "
                    "to a writable volume, or reuse of this key over another input is not "
                    "refused (docs/privacy.md P13)", where, e.strerror, STATE_DIR_ENV)


def run_worker(config: WorkerConfig) -> None:
    """Check the environment, then run the Faust worker until it is stopped."""
    from faust.worker import Worker

    from dpsynth.stream.app import create_app
    from dpsynth.stream.phases import phase
    from dpsynth.stream.runcheck import check_run_key
    from dpsynth.stream.topics import ensure_compacted

    phase("connecting", f"broker {config.broker}")
    partitions = check_topics(config)
    config = with_input_partitions(config, partitions[config.input_topic])
    latest, state = config.latest_topic_name, config.state_topic_name
    if latest is not None:
        partitions[latest] = ensure_compacted(
            config.bootstrap_servers(), latest, partitions[config.input_topic],
            max_message_bytes=max(config.release_max_record_bytes + 65_536, 1_048_588))
    if state is not None:
        partitions[state] = ensure_compacted(
            config.bootstrap_servers(), state, partitions[config.input_topic],
            max_message_bytes=1_048_588, role="state topic", variable="DPSYNTH_CHANGELOG")
    check_run_key(config.bootstrap_servers(), config.output_topic, config.run_id,
                  config.noise_key.fingerprint, records=config.key_check_records)
    bind_input(config)
    phase("connected", f"topic partitions {partitions}; run id and key checked")
    lock = lock_data_dir(config)
    phase("compiling kernels", "numba, cached on disk after the first start (a first start "
          "compiles them: about a minute on 2 cores)"
          if config.engine == "points" else "none for the tabular engine")
    compiling = time.monotonic()
    warm_up(config)
    phase("kernels ready", f"{time.monotonic() - compiling:.1f} s")
    app, _ = create_app(config, latest_partitions=partitions.get(latest or "", 1),
                        state_partitions=partitions.get(state or "", 1),
                        output_partitions=partitions[config.output_topic],
                        points_partitions=partitions.get(config.points_topic, 1))
    log.info("dpsynth worker: %s; topic partitions %s", config.public_summary(), partitions)
    worker = Worker(app, loglevel=config.log_level, quiet=True, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    finally:
        lock.close()


@click.command("worker")
@click.option(
    "--config", "config_file", type=click.Path(exists=True, dir_okay=False),
    help="JSON or TOML settings file (keys: the DPSYNTH_* names in lower case, without the "
    "prefix); environment variables override it.",
)
def worker(config_file: str | None) -> None:
    """Run the Kafka worker: raw events in, DP releases out (settings: DPSYNTH_* variables)."""
    if config_file:
        os.environ["DPSYNTH_CONFIG_FILE"] = config_file
    # `kill -USR1 <pid>` writes every thread's stack to stderr (a worker that seems stuck shows
    # where; stacks hold code locations only, no values)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        config = load_config()
        logging.basicConfig(level=config.log_level.upper().replace("WARN", "WARNING")
                            .replace("CRIT", "CRITICAL"),
                            format="[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s")
        from dpsynth.stream.phases import phase

        phase("config checked", f"run {config.run_id!r}, input {config.input_topic!r}, "
              f"engine {config.engine}")
        run_worker(config)
    except DpsynthError as e:
        raise StartError(str(e)) from None
