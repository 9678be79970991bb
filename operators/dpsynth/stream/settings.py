"""The worker's configuration: ``DPSYNTH_*`` environment variables over an optional file.

Layer: adapter. :class:`WorkerConfig` is a pydantic-settings model: every setting is declared
once (type, default, rule) and read from ``DPSYNTH_`` + its name in upper case. :func:`load_config`
adds ``DPSYNTH_CONFIG_FILE`` (JSON or TOML whose keys are the settings' names; the environment
wins) and turns every refusal into one :class:`ConfigError` naming the variables and the fixes.

The noise key (``DPSYNTH_NOISE_KEY``, 64 hex characters, or ``DPSYNTH_NOISE_KEY_FILE``) is read by
:func:`dpsynth.keys.load_noise_key` into a :class:`~dpsynth.keys.NoiseKey` whose ``repr`` shows
only its public fingerprint; the raw value is a :class:`~pydantic.SecretStr`, and no message of
this module ever contains the key or any part of it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from dpsynth.errors import ConfigError
from dpsynth.keys import NoiseKey, load_noise_key
from dpsynth.online.mechanism import NEIGHBOUR_NOTIONS
from dpsynth.schema import Schema
from dpsynth.settings import (
    PREFIX,
    Mechanism,
    SynthesisSettings,
    boolean,
    bootstrap_of,
    choice,
    config_error,
    env_name,
    integer,
    matching,
    number,
)
from dpsynth.tabular.counters import COUNTERS
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import METHODS, TabularSynthesizer

__all__ = ["CRASH_POINTS", "NoiseKey", "TabularSettings", "WorkerConfig", "bootstrap_of",
           "load_config"]

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's legal topic names
_IDENT = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
CRASH_POINTS = ("mid_tick", "mid_release", "after_release_produced",
                "after_state_commit_before_ack")
#: How to fix a missing required setting.
_FIXES = {
    "DPSYNTH_BROKER": "set it to the bootstrap servers, e.g. kafka://127.0.0.1:9092",
    "DPSYNTH_EPSILON": "set the privacy budget, e.g. DPSYNTH_EPSILON=1.0",
}

Topic = Annotated[str, matching(
    lambda t: bool(_TOPIC.match(t)) and t not in (".", ".."),
    "must be a Kafka topic name: 1-249 characters of [A-Za-z0-9._-]")]
Ident = Annotated[str, matching(
    lambda t: t == "" or bool(_IDENT.match(t)),
    "must be 1-200 characters of [A-Za-z0-9._-] (e.g. the pod name of a StatefulSet)")]


def _crash_at(value: Any) -> tuple[str, int] | None:
    if value is None or isinstance(value, tuple):
        return value
    point, _, count = str(value).strip().partition(":")
    if point not in CRASH_POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"must be POINT:N with N >= 1 and POINT one of {CRASH_POINTS} (a test "
                         "hook: unset it in production)")
    return point, int(count)


def _tabular_default(name: str) -> Any:
    return inspect.signature(TabularSynthesizer).parameters[name].default


@dataclass(frozen=True)
class TabularSettings:
    """The tabular engine's part of the configuration (``DPSYNTH_ENGINE=tabular``)."""

    domain_file: str
    domain: Domain
    mechanism: str
    counter: str
    workloads_per_step: int | None

    def summary(self) -> dict[str, Any]:
        """Loggable form (the domain by file, attribute count and digest)."""
        return {
            "domain_file": self.domain_file, "attributes": len(self.domain.attributes),
            "domain_digest": self.domain.digest(), "mechanism": self.mechanism,
            "counter": self.counter, "workloads_per_step": self.workloads_per_step,
        }


class WorkerConfig(SynthesisSettings, BaseSettings):
    """Everything a worker needs; read and checked by :func:`load_config`."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, frozen=True, extra="ignore", populate_by_name=True,
        case_sensitive=True, alias_generator=env_name,
    )

    broker: str
    input_topic: Topic = "dpsynth-raw-events"
    output_topic: Topic = "dpsynth-synthetic"
    dead_letter_topic: Topic = "dpsynth-dead-letter"
    engine: Annotated[str, choice(("points", "tabular"), lower=True)] = "points"
    schema_file: str = ""
    domain_file: str = ""
    mechanism: Mechanism = Field(  # DPSYNTH_SCHEDULE: its name before 0.2, still read
        "auto", validation_alias=AliasChoices("DPSYNTH_MECHANISM", "DPSYNTH_SCHEDULE"))
    #: Each engine's paper notion by default: replace (points), add_remove (tabular).
    neighbours: Annotated[str, choice(("", *NEIGHBOUR_NOTIONS))] = ""
    tabular_mechanism: Annotated[str, choice(METHODS)] = Field(
        str(_tabular_default("mechanism")),
        validation_alias=AliasChoices("DPSYNTH_TABULAR_MECHANISM", "DPSYNTH_TABULAR_METHOD"))
    tabular_counter: Annotated[str, choice(COUNTERS)] = str(_tabular_default("counter"))
    #: k (None: the library's default, max(1, round(2ε))).
    tabular_workloads_per_step: Annotated[int, integer(1)] | None = None
    #: Period P of the tick markers (0: none; replacement only): public time (P11).
    tick_seconds: Annotated[float, number(0.0)] = 60.0
    run_id: Ident = ""  # default: run-<key fingerprint>
    #: Records read from the end of each output partition for the key check at start (P13).
    key_check_records: Annotated[int, integer(0)] = 10_000
    #: The input topic's partition count (privacy unit "user": bound to the state); 0 = read
    #: from the broker at start. Users are owned by partitions through it (P15).
    input_partitions: Annotated[int, integer(0)] = 0
    #: Users whose counts stay in memory between commits (privacy unit "user"); beyond, the
    #: cache is dropped after a commit and users are read back from the store.
    user_cache_entries: Annotated[int, integer(1)] = 1 << 20
    data_dir: Path = Path("dpsynth-data")
    noise_key_hex: SecretStr | None = Field(None, alias="DPSYNTH_NOISE_KEY", repr=False)
    noise_key_file: str | None = None
    web_port: Annotated[int, integer(1, 65535)] = 6066
    web_bind: str = "0.0.0.0"  # noqa: S104 - probes and Prometheus reach the pod's IP
    group_id: Ident = ""
    #: Static membership: "" derives one (:meth:`instance_id`), "off" turns it off.
    group_instance_id: Ident = ""
    #: Bytes of a rejected message's payload copied into its dead letter (raw data: 0).
    dead_letter_prefix_bytes: Annotated[int, integer(0, 65_536)] = 0
    #: /healthz fails when the input loop did not poll, or did not advance while input
    #: waits, for this long.
    liveness_timeout_s: Annotated[float, number(1.0)] = 120.0
    # -- tuning ---------------------------------------------------------------------------
    batch_max_events: Annotated[int, integer(1)] = 2000
    batch_within_s: Annotated[float, number(0.0, strict=True)] = 0.1
    release_linger_s: Annotated[float, number(0.0)] = 0.2
    checkpoint_interval_s: Annotated[float, number(0.0, strict=True)] = 5.0
    #: Least time between two state commits while releases flow (releases are published at
    #: their own pace; a crash re-publishes the ones after the last commit, byte-identical).
    state_commit_interval_s: Annotated[float, number(0.0)] = 1.0
    max_unacked_events: Annotated[int, integer(1)] = 20_000
    state_chunk_bytes: Annotated[int, integer(4096, 64 * 2**20)] = 256 * 1024
    state_sync: Annotated[bool, boolean()] = True
    rocksdb_block_cache_bytes: Annotated[int, integer(0)] = 8 * 2**20
    rocksdb_write_buffer_bytes: Annotated[int, integer(2**16)] = 4 * 2**20
    release_max_record_bytes: Annotated[int, integer(1024, 1_000_000)] = 256_000
    session_timeout_s: Annotated[float, number(1.0)] = 30.0
    #: Longest batch (seconds between two polls) before the group takes the partitions away.
    max_batch_seconds: Annotated[float, number(10.0)] = 300.0
    #: Largest input message the consumer accepts (a larger one is dead-lettered unread if the
    #: broker lets it in; raise it with the topic's max.message.bytes).
    max_input_message_bytes: Annotated[int, integer(1_048_576, 2**30)] = 128 * 2**20
    log_level: Annotated[str, choice(("crit", "error", "warn", "info", "debug"),
                                     lower=True)] = "info"
    crash_at: Annotated[tuple[str, int] | None, BeforeValidator(_crash_at)] = None

    # -- derived (checked by load_config) -------------------------------------------------

    @cached_property
    def noise_key(self) -> NoiseKey:
        """The run's key (:mod:`dpsynth.keys`); its repr shows only the fingerprint."""
        secret = self.noise_key_hex.get_secret_value() if self.noise_key_hex else ""
        return load_noise_key({"DPSYNTH_NOISE_KEY": secret,
                               "DPSYNTH_NOISE_KEY_FILE": self.noise_key_file or ""})

    @cached_property
    def schema(self) -> Schema | None:
        """The point engine's schema (``DPSYNTH_SCHEMA_FILE``); None for the tabular engine."""
        if self.engine == "tabular":
            return None
        try:
            return self.user_schema(Schema.from_json_file(self.schema_file))
        except OSError as e:
            raise ConfigError(f"DPSYNTH_SCHEMA_FILE ({self.schema_file!r}) cannot be read "
                              f"({e.strerror}); fix the path") from None
        except ConfigError as e:
            raise ConfigError(f"DPSYNTH_SCHEMA_FILE ({self.schema_file!r}): {e}") from None

    @cached_property
    def tabular(self) -> TabularSettings | None:
        """The tabular engine's settings (domain loaded); None for the point engine."""
        if self.engine != "tabular":
            return None
        if not Path(self.domain_file).is_file():
            raise ConfigError(
                f"DPSYNTH_DOMAIN_FILE ({self.domain_file!r}) is not a readable file; fix the path")
        try:
            domain = Domain.from_json_file(self.domain_file)
        except ConfigError as e:
            raise ConfigError(f"DPSYNTH_DOMAIN_FILE ({self.domain_file!r}): {e}") from None
        return TabularSettings(self.domain_file, domain, self.tabular_mechanism,
                               self.tabular_counter, self.tabular_workloads_per_step)

    def tabular_synthesizer(self, partition: int, key: bytes | None = None
                            ) -> TabularSynthesizer:
        """A fresh tabular synthesizer of ``partition`` (``key``: the run key by default)."""
        s = self.tabular
        if s is None:
            raise ConfigError("DPSYNTH_ENGINE=tabular needs DPSYNTH_DOMAIN_FILE; set it")
        return TabularSynthesizer(
            s.domain, self.epsilon, self.noise_key.reveal() if key is None else key,
            release_every=self.release_every, mechanism=s.mechanism, counter=s.counter,
            workloads_per_step=s.workloads_per_step, partition=partition,
            neighbours=self.neighbours,
        )

    @property
    def d(self) -> int:
        """Dimension of the points (the schema's columns), or the domain's attribute count."""
        if self.schema is None:
            return len(self.tabular.domain.attributes) if self.tabular is not None else 0
        return self.schema.d

    @property
    def app_id(self) -> str:
        """The Faust app id, which is the input consumer group."""
        return self.group_id or f"dpsynth-{self.run_id}"

    def instance_id(self) -> str:
        """``group.instance.id`` of the input consumer ("" when static membership is off).

        Default: ``<POD_NAME or host name>-<digest of the data directory>``: stable across
        restarts of a pod or process (same host, same volume), and different for two workers
        on one host (each holds its own data directory, locked at start).
        """
        if self.group_instance_id == "off":
            return ""
        if self.group_instance_id:
            return self.group_instance_id
        host = os.environ.get("POD_NAME") or socket.gethostname() or "worker"
        host = re.sub(r"[^A-Za-z0-9._-]", "-", host)[:150]
        where = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:10]
        return f"{host}-{where}"

    def bootstrap_servers(self) -> str:
        """``host:port,host:port`` for confluent-kafka (the Faust URL without ``kafka://``)."""
        return bootstrap_of(self.broker)

    def faust_broker(self) -> str:
        """``kafka://host:port;kafka://host:port`` for Faust."""
        return ";".join(f"kafka://{s}" for s in self.bootstrap_servers().split(","))

    def public_summary(self) -> dict[str, Any]:
        """The settings safe to log: everything except the key (its fingerprint instead)."""
        out = {k: str(v) if isinstance(v, Path) else v
               for k, v in self.model_dump(exclude={"noise_key_hex"}).items()}
        if self.tabular is not None:
            out["tabular"] = self.tabular.summary()
        out["key_fingerprint"] = self.noise_key.fingerprint
        out["d"] = self.d
        return out


def _known() -> set[str]:
    names = set()
    for name, field in WorkerConfig.model_fields.items():
        names.add(name)
        alias = field.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias or field.alias]
        names.update(str(c).removeprefix(PREFIX).lower() for c in choices if c)
    return names


def _read_file(path: str) -> dict[str, str]:
    """``DPSYNTH_CONFIG_FILE``: settings by name (JSON or TOML), as variables; never the key."""
    name = f"DPSYNTH_CONFIG_FILE ({path!r})"
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{name} cannot be read ({e.strerror}); fix the path") from None
    kind = "TOML" if path.endswith(".toml") else "JSON"
    try:
        data = tomllib.loads(raw.decode("utf-8")) if kind == "TOML" else json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{name} must be valid {kind}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name} must hold one object/table of settings")
    known = _known()
    out = {}
    for key, value in data.items():
        key = str(key).lower()
        if key in ("noise_key", "noise_key_hex"):
            raise ConfigError(
                f"{name} must not hold the noise key: set noise_key_file (a file readable only "
                "by the worker) or the DPSYNTH_NOISE_KEY variable")
        if key not in known:
            raise ConfigError(f"{name}: unknown setting {key!r}; known: {sorted(known)}")
        out[env_name(key)] = value if isinstance(value, str) else json.dumps(value)
    return out


def load_config(environ: Mapping[str, str] | None = None) -> WorkerConfig:
    """Read and check the configuration (environment over ``DPSYNTH_CONFIG_FILE``).

    Raises
    ------
    ConfigError
        Naming every invalid or missing setting and its fix; never showing the key.
    """
    env = dict(os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    config_file = env.get("DPSYNTH_CONFIG_FILE", "").strip()
    if config_file:
        values.update(_read_file(config_file))
    values.update({k: v for k, v in env.items() if k.startswith(PREFIX) and str(v).strip()})
    try:
        config = WorkerConfig.model_validate(values)
    except ValidationError as e:
        raise config_error(e, _FIXES) from None
    return _checked(config)


def _checked(config: WorkerConfig) -> WorkerConfig:
    """Cross-setting rules, derived settings and a throwaway synthesizer (fail at start)."""
    _check_engine_variables(config)
    topics = (config.input_topic, config.output_topic, config.dead_letter_topic)
    if len(set(topics)) != 3:
        raise ConfigError(
            "DPSYNTH_INPUT_TOPIC, DPSYNTH_OUTPUT_TOPIC and DPSYNTH_DEAD_LETTER_TOPIC must be "
            f"three different topics (got {sorted(topics)})")
    updates: dict[str, Any] = {"run_id": config.run_id or f"run-{config.noise_key.fingerprint}"}
    if not config.neighbours:
        updates["neighbours"] = "add_remove" if config.engine == "tabular" else "replace"
    config = config.model_copy(update=updates)
    if config.privacy_unit == "user" and config.engine == "tabular":
        raise ConfigError(
            "DPSYNTH_PRIVACY_UNIT=user is implemented for the point engine only; the tabular "
            "engine protects records (unset DPSYNTH_PRIVACY_UNIT, or use DPSYNTH_ENGINE=points)")
    if config.neighbours == "add_remove":  # privacy: P11 (steps end only at tick markers)
        if config.tick_seconds <= 0:
            raise ConfigError(
                "DPSYNTH_TICK_SECONDS=0 under DPSYNTH_NEIGHBOURS=add_remove: steps end only at "
                "tick markers, so no release would ever be made; set a period, e.g. "
                "DPSYNTH_TICK_SECONDS=60")
        if "release_every" in config.model_fields_set:
            raise ConfigError(
                "DPSYNTH_RELEASE_EVERY is set but DPSYNTH_NEIGHBOURS=add_remove ends steps only "
                "at tick markers (every DPSYNTH_TICK_SECONDS): a step of N records would reveal "
                "the private count. Unset DPSYNTH_RELEASE_EVERY (or use "
                "DPSYNTH_NEIGHBOURS=replace)")
    try:
        if config.engine == "tabular":
            config.tabular_synthesizer(0, key=bytes(32))
        else:
            config.synthesizer(config.d, bytes(32))
    except ConfigError as e:
        names = ("DPSYNTH_EPSILON / DPSYNTH_RELEASE_EVERY / DPSYNTH_DOMAIN_FILE / DPSYNTH_TABULAR_*"
                 if config.engine == "tabular" else
                 "DPSYNTH_EPSILON / DPSYNTH_RELEASE_EVERY / DPSYNTH_MAX_DEPTH / DPSYNTH_MECHANISM"
                 " / DPSYNTH_NEIGHBOURS / DPSYNTH_PRIVACY_UNIT / DPSYNTH_MAX_CONTRIBUTIONS")
        raise ConfigError(f"{names}: {e}") from None
    return config


def _check_engine_variables(config: WorkerConfig) -> None:
    """The engine's input description is set, and the other engine's is not."""
    given = config.model_fields_set
    if config.engine == "tabular":
        if config.schema_file:
            raise ConfigError(
                "DPSYNTH_SCHEMA_FILE is set but DPSYNTH_ENGINE=tabular reads the records' domain "
                "from DPSYNTH_DOMAIN_FILE: unset DPSYNTH_SCHEMA_FILE (or set "
                "DPSYNTH_ENGINE=points)")
        if not config.domain_file:
            raise ConfigError(
                "DPSYNTH_DOMAIN_FILE is not set: DPSYNTH_ENGINE=tabular needs the finite domain of "
                "the records: point it at a domain JSON file (format: schemas/domain.v1.json)")
        config.tabular  # noqa: B018 - loads and checks the domain now
        return
    for field in ("domain_file", "tabular_mechanism", "tabular_counter",
                  "tabular_workloads_per_step"):
        if field in given:
            name = env_name(field)
            raise ConfigError(
                f"{name} is set but DPSYNTH_ENGINE is 'points': set DPSYNTH_ENGINE=tabular to run "
                f"the tabular synthesizer, or unset {name}")
    if not config.schema_file:
        raise ConfigError("DPSYNTH_SCHEMA_FILE is not set: point it at a schema JSON file "
                          "(format: schemas/record-schema.v1.json)")
    config.schema  # noqa: B018 - loads and checks the schema now
