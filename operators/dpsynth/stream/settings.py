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
import json
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dpsynth.client.consumer import latest_view_topic
from dpsynth.errors import ConfigError
from dpsynth.keys import NoiseKey, load_noise_key
from dpsynth.params import CRASH_POINTS, PARAMS
from dpsynth.release.points_arrow import check_points_output
from dpsynth.schema import Schema
from dpsynth.settings import WorkerSettings, bootstrap_of, config_error, env_name
from dpsynth.tabular.config import TabularConfig
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer

__all__ = ["CRASH_POINTS", "NoiseKey", "TabularSettings", "WorkerConfig", "bootstrap_of",
           "load_config"]

#: Variables renamed before 0.1: refused with the new name rather than silently ignored.
_RENAMED = {"DPSYNTH_SCHEDULE": "DPSYNTH_MECHANISM",
            "DPSYNTH_TABULAR_METHOD": "DPSYNTH_TABULAR_MECHANISM"}
#: How to fix a missing required setting.
_FIXES = {
    "DPSYNTH_BROKER": "set it to the bootstrap servers, e.g. kafka://127.0.0.1:9092",
    "DPSYNTH_EPSILON": "set the privacy budget, e.g. DPSYNTH_EPSILON=1.0",
}


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


class WorkerConfig(WorkerSettings):
    """Everything a worker needs; read and checked by :func:`load_config`. The settings are
    the generated :class:`~dpsynth.settings.WorkerSettings`; this class adds what is derived
    from them."""

    # -- derived (checked by load_config) -------------------------------------------------

    @cached_property
    def noise_key(self) -> NoiseKey:
        """The run's key (:mod:`dpsynth.keys`); its repr shows only the fingerprint."""
        secret = self.noise_key_hex.get_secret_value() if self.noise_key_hex else ""
        return load_noise_key({"DPSYNTH_NOISE_KEY": secret,
                               "DPSYNTH_NOISE_KEY_FILE": self.noise_key_file or ""})

    @cached_property  # shadows pydantic v1's deprecated BaseModel.schema(), unused here
    def schema(self) -> Schema | None:  # type: ignore[override]
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

    def tabular_config(self, partition: int) -> TabularConfig:
        """The resolved :class:`~dpsynth.tabular.config.TabularConfig` of ``partition``,
        checked once by its ``resolve`` (the settings only parsed the text)."""
        s = self.tabular
        if s is None:
            raise ConfigError("DPSYNTH_ENGINE=tabular needs DPSYNTH_DOMAIN_FILE; set it")
        assert self.release_every is not None and self.neighbours is not None  # the engine's
        return TabularConfig.resolve(
            s.domain, self.epsilon, self.release_every, mechanism=s.mechanism,
            counter=s.counter, workloads_per_step=s.workloads_per_step, partition=partition,
            neighbours=self.neighbours,
        )

    def tabular_synthesizer(self, partition: int, key: bytes | None = None
                            ) -> TabularSynthesizer:
        """A fresh tabular synthesizer of ``partition`` (``key``: the run key by default)."""
        return TabularSynthesizer.from_config(
            self.tabular_config(partition), self.noise_key.reveal() if key is None else key)

    @property
    def d(self) -> int:
        """Dimension of the points (the schema's columns), or the domain's attribute count."""
        if self.schema is None:
            return len(self.tabular.domain.attributes) if self.tabular is not None else 0
        return self.schema.d

    @property
    def latest_topic_name(self) -> str | None:
        """The latest view's compacted topic (``DPSYNTH_LATEST_TOPIC``, else the output topic's
        name + ``-latest``), or None when ``DPSYNTH_LATEST_VIEW`` is off."""
        if not self.latest_view:
            return None
        return self.latest_topic or latest_view_topic(self.output_topic)

    @property
    def state_topic_name(self) -> str | None:
        """The state topic (``DPSYNTH_STATE_TOPIC``, else the group id + ``-state``), or None
        when ``DPSYNTH_CHANGELOG`` is off."""
        if not self.changelog:
            return None
        return self.state_topic or f"{self.app_id}-state"

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
    """Setting names a configuration file may hold (fields and their variables' names)."""
    names = set(WorkerConfig.model_fields)
    names.update(PARAMS[name].env.removeprefix("DPSYNTH_").lower()
                 for name in WorkerConfig.model_fields)
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
    values.update({k: v for k, v in env.items() if k.startswith("DPSYNTH_") and str(v).strip()})
    for old, new in _RENAMED.items():
        if old in values or old.removeprefix("DPSYNTH_").lower() in values:
            raise ConfigError(f"{old} is now {new}: rename it")
    try:
        config = WorkerConfig.model_validate(values)
    except ValidationError as e:
        raise config_error(e, _FIXES) from None
    return _checked(config)


def _checked(config: WorkerConfig) -> WorkerConfig:
    """Cross-setting rules, derived settings and a throwaway synthesizer (fail at start)."""
    _check_engine_variables(config)
    topics = [config.input_topic, config.output_topic, config.dead_letter_topic]
    for derived, variable in ((config.latest_topic_name, "DPSYNTH_LATEST_TOPIC"),
                              (config.state_topic_name, "DPSYNTH_STATE_TOPIC")):
        if derived is not None:
            topics.append(derived)
            if len(derived) > 249:
                raise ConfigError(f"the topic name {derived[:40]}... is longer than Kafka's "
                                  f"249 characters: set {variable}")
    if len(set(topics)) != len(topics):
        raise ConfigError(
            "DPSYNTH_INPUT_TOPIC, DPSYNTH_OUTPUT_TOPIC, DPSYNTH_DEAD_LETTER_TOPIC, the latest "
            "view (DPSYNTH_LATEST_TOPIC) and the state topic (DPSYNTH_STATE_TOPIC) must be "
            f"different topics (got {sorted(topics)})")
    given = set(config.model_fields_set)  # before the engine's defaults fill the rest
    updates: dict[str, Any] = {"run_id": config.run_id or f"run-{config.noise_key.fingerprint}"}
    for name, param in PARAMS.items():  # the settings whose default is the engine's
        if param.engines and name in WorkerConfig.model_fields and getattr(config, name) is None:
            updates[name] = param.default_for(config.engine)
    config = config.model_copy(update=updates)
    if config.release_growth and config.engine == "tabular":
        raise ConfigError(
            "DPSYNTH_RELEASE_GROWTH grows the point engine's steps; the tabular engine takes "
            "steps of DPSYNTH_RELEASE_EVERY rows: unset it (or use DPSYNTH_ENGINE=points)")
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
        for name in ("release_every", "release_growth"):  # steps counted in records
            if name in given:
                env = f"DPSYNTH_{name.upper()}"
                raise ConfigError(
                    f"{env} is set but DPSYNTH_NEIGHBOURS=add_remove ends steps only at tick "
                    "markers (every DPSYNTH_TICK_SECONDS): a step of N records would reveal "
                    f"the private count. Unset {env} (or use DPSYNTH_NEIGHBOURS=replace)")
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
    _check_points(config, tuple(topics))
    return config


def _check_points(config: WorkerConfig, topics: tuple[str, ...]) -> None:
    """DPSYNTH_POINTS_FORMAT: the point engine, its own topic, pyarrow, room for a row."""
    if config.points_format == "none":
        return
    if config.engine == "tabular":
        raise ConfigError("DPSYNTH_POINTS_FORMAT applies to the point engine: tabular releases "
                          "carry their rows already; unset DPSYNTH_POINTS_FORMAT")
    if config.points_topic in topics:
        raise ConfigError(f"DPSYNTH_POINTS_TOPIC ({config.points_topic!r}) must differ from the "
                          "input, output, dead-letter, latest-view and state topics")
    assert config.schema is not None  # the point engine's (checked before)
    metadata = config.synthesizer(config.d, bytes(32)).release().metadata
    try:
        check_points_output(config.schema, config.release_max_record_bytes, metadata)
    except ConfigError as e:
        raise ConfigError(f"DPSYNTH_POINTS_FORMAT={config.points_format}: " + str(e).replace(
            "release_max_record_bytes", "DPSYNTH_RELEASE_MAX_RECORD_BYTES")) from None


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
