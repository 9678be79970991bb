"""The settings models, their fields generated from the declarations (:mod:`dpsynth.params`).

Layer: adapter (pydantic). :class:`SynthesisSettings` holds the synthesis parameters that
``dpsynth run`` and the worker share and builds the :class:`~dpsynth.online.OnlineSynthesizer`;
:class:`WorkerSettings` adds every worker setting (``DPSYNTH_*``), and
:class:`~dpsynth.stream.settings.WorkerConfig` adds the worker's derived settings to it. No
field is written by hand: the two blocks marked "generated" are written by
``python -m dpsynth.params --write`` from each :class:`~dpsynth.params.Param` (type, default,
rule), so mypy and an IDE see typed fields, and a test fails when a block drifts from the
declarations (docs/settings.md, "Adding a setting"). A bad value is refused with
:class:`~dpsynth.errors.ConfigError` naming the variable (or option), the value and the rule
(never a key: secrets are :class:`~pydantic.SecretStr`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from dpsynth.errors import ConfigError
from dpsynth.online.config import OnlineConfig
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.params import PARAMS, PREFIX, REQUIRED, shared_params, worker_params
from dpsynth.schema import Schema


def env_name(field: str) -> str:
    """The environment variable of a settings field (its parameter's ``env``)."""
    param = PARAMS.get(field)
    return param.env if param is not None else PREFIX + field.upper()


def rule(name: str, *, by_engine: bool = False) -> BeforeValidator:
    """The field's check: its declaration's :meth:`~dpsynth.params.Param.parse` (``by_engine``:
    None passes, until the engine's default fills it)."""
    parse = PARAMS[name].parse
    if by_engine:
        return BeforeValidator(lambda v: None if v is None else parse(v))
    return BeforeValidator(parse)


def declared(name: str, *, by_engine: bool = False) -> Any:
    """The field's default and alias (its variable) from its declaration."""
    param = PARAMS[name]
    default: Any = None if by_engine else param.default
    default = ... if default is REQUIRED else default
    return Field(default, alias=param.env, repr=param.kind != "secret")


#: The synthesis parameters ``dpsynth run`` and the worker share.
SHARED = shared_params()
#: Every other worker setting.
WORKER_ONLY = worker_params()


def option_name(field: str) -> str:
    """The command-line option of a settings field: ``--release-every``."""
    param = PARAMS.get(field)
    return param.option_name if param is not None else "--" + field.replace("_", "-")


#: A setting's field name by its environment variable (error locations use the alias).
_BY_ENV = {p.env: p.name for p in PARAMS.values()}


def config_error(error: ValidationError, fixes: Mapping[str, str] | None = None, *,
                 label: Callable[[str], str] = env_name) -> ConfigError:
    """One :class:`ConfigError` listing every refused setting as ``NAME ('value') rule``.

    Field names are shown by ``label`` (their environment variables by default, or
    :func:`option_name` for a command line); a missing one as ``NAME is not set`` with its fix
    from ``fixes``. Secret fields never show their value.
    """
    messages = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        field = _BY_ENV.get(field, field)
        name = label(field) if field else ""
        rule = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "missing":
            messages.append(f"{name} is not set: {(fixes or {}).get(name, 'set it')}")
        elif not name:
            messages.append(rule)
        elif "KEY" in name:  # privacy: never echo a key
            messages.append(f"{name} {rule}")
        else:
            messages.append(f"{name} ({str(item.get('input'))!r}) {rule}")
    return ConfigError("; ".join(messages))


class SynthesisSettings(BaseModel):
    """The online synthesizer's public parameters (``DPSYNTH_EPSILON`` … in the worker)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    # -- generated: synthesis (python -m dpsynth.params --write; edit dpsynth.params) --
    epsilon: Annotated[float, rule("epsilon")] = declared("epsilon")
    release_every: Annotated[int, rule("release_every")] = declared("release_every")
    release_growth: Annotated[float, rule("release_growth")] = declared("release_growth")
    max_depth: Annotated[int, rule("max_depth")] = declared("max_depth")
    mechanism: Annotated[str, rule("mechanism")] = declared("mechanism")
    neighbours: Annotated[str, rule("neighbours")] = declared("neighbours")
    privacy_unit: Annotated[str, rule("privacy_unit")] = declared("privacy_unit")
    max_contributions: Annotated[int | None, rule("max_contributions")] = (
        declared("max_contributions"))
    max_contributions_per_step: Annotated[int | None, rule("max_contributions_per_step")] = (
        declared("max_contributions_per_step"))
    user_column: Annotated[str, rule("user_column")] = declared("user_column")
    # -- end generated

    @classmethod
    def of(cls, *, label: Callable[[str], str] = env_name, **values: Any) -> SynthesisSettings:
        """Validated settings, or a :class:`ConfigError` naming every bad one by ``label``."""
        try:
            return cls(**values)
        except ValidationError as e:
            raise config_error(e, label=label) from None

    def config(self, d: int, **options: Any) -> OnlineConfig:
        """The resolved :class:`~dpsynth.online.config.OnlineConfig` of these settings and
        ``d`` (``options``: placement, partition…), checked once by its ``resolve``."""
        return OnlineConfig.resolve(
            d, self.epsilon, self.release_every, self.mechanism, self.max_depth,
            neighbours=self.neighbours, release_growth=self.release_growth,
            privacy_unit=self.privacy_unit, max_contributions=self.max_contributions,
            max_contributions_per_step=self.max_contributions_per_step, **options)

    def synthesizer(self, d: int, key: bytes, **options: Any) -> OnlineSynthesizer:
        """The :class:`OnlineSynthesizer` of these settings (``options``: placement, partition…)."""
        return OnlineSynthesizer.from_config(self.config(d, **options), key)

    def user_schema(self, schema: Schema, *, label: Callable[[str], str] = env_name
                    ) -> Schema:
        """``schema`` with the user id column of these settings (privacy unit "user").

        The column comes from ``user_column`` or the schema's own ``user_column``; two
        different names are refused. Under the unit "record" a declared column is ignored.
        """
        if self.privacy_unit == "record":
            if self.user_column:
                raise ConfigError(f"{label('user_column')} ({self.user_column!r}) names the "
                                  f"user id for {label('privacy_unit')}=user; set that too, or "
                                  "drop it")
            return dataclasses.replace(schema, user_column=None)  # ignored per record
        declared = schema.user_column
        if self.user_column and declared and self.user_column != declared:
            raise ConfigError(f"{label('user_column')} ({self.user_column!r}) differs from the "
                              f"schema's user_column ({declared!r}); name one column")
        column = self.user_column or declared
        return schema if column == declared else dataclasses.replace(schema, user_column=column)


def bootstrap_of(broker: str) -> str:
    """``kafka://a:9092;kafka://b:9092`` or ``a:9092,b:9092`` → ``a:9092,b:9092``.

    >>> bootstrap_of("kafka://k1:9092;kafka://k2:9092")
    'k1:9092,k2:9092'
    """
    parts = [p.strip() for p in re.split(r"[;,]", broker) if p.strip()]
    return ",".join(p.split("://", 1)[1] if "://" in p else p for p in parts)


class WorkerSettings(SynthesisSettings, BaseSettings):
    """Every worker setting, read from ``DPSYNTH_`` + its name in upper case; the settings with
    a default per engine are unset (None) until the engine resolves them."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, frozen=True, extra="ignore", populate_by_name=True,
        case_sensitive=True)

    # -- generated: worker (python -m dpsynth.params --write; edit dpsynth.params) --
    release_every: Annotated[int | None, rule("release_every", by_engine=True)] = (
        declared("release_every", by_engine=True))  # type: ignore[assignment]
    neighbours: Annotated[str | None, rule("neighbours", by_engine=True)] = (
        declared("neighbours", by_engine=True))  # type: ignore[assignment]
    tabular_mechanism: Annotated[str, rule("tabular_mechanism")] = declared("tabular_mechanism")
    tabular_counter: Annotated[str, rule("tabular_counter")] = declared("tabular_counter")
    tabular_workloads_per_step: Annotated[int | None, rule("tabular_workloads_per_step")] = (
        declared("tabular_workloads_per_step"))
    broker: Annotated[str, rule("broker")] = declared("broker")
    input_topic: Annotated[str, rule("input_topic")] = declared("input_topic")
    output_topic: Annotated[str, rule("output_topic")] = declared("output_topic")
    dead_letter_topic: Annotated[str, rule("dead_letter_topic")] = declared("dead_letter_topic")
    points_format: Annotated[str, rule("points_format")] = declared("points_format")
    points_topic: Annotated[str, rule("points_topic")] = declared("points_topic")
    latest_view: Annotated[bool, rule("latest_view")] = declared("latest_view")
    latest_topic: Annotated[str, rule("latest_topic")] = declared("latest_topic")
    changelog: Annotated[bool, rule("changelog")] = declared("changelog")
    state_topic: Annotated[str, rule("state_topic")] = declared("state_topic")
    engine: Annotated[str, rule("engine")] = declared("engine")
    schema_file: Annotated[str, rule("schema_file")] = declared("schema_file")
    domain_file: Annotated[str, rule("domain_file")] = declared("domain_file")
    tick_seconds: Annotated[float, rule("tick_seconds")] = declared("tick_seconds")
    run_id: Annotated[str, rule("run_id")] = declared("run_id")
    key_check_records: Annotated[int, rule("key_check_records")] = declared("key_check_records")
    input_partitions: Annotated[int, rule("input_partitions")] = declared("input_partitions")
    user_cache_entries: Annotated[int, rule("user_cache_entries")] = declared("user_cache_entries")
    data_dir: Annotated[Path, rule("data_dir")] = declared("data_dir")
    state_dir: Annotated[str, rule("state_dir")] = declared("state_dir")
    noise_key_hex: SecretStr | None = declared("noise_key_hex")
    noise_key_file: Annotated[str | None, rule("noise_key_file")] = declared("noise_key_file")
    web_port: Annotated[int, rule("web_port")] = declared("web_port")
    web_bind: Annotated[str, rule("web_bind")] = declared("web_bind")
    group_id: Annotated[str, rule("group_id")] = declared("group_id")
    group_instance_id: Annotated[str, rule("group_instance_id")] = declared("group_instance_id")
    dead_letter_prefix_bytes: Annotated[int, rule("dead_letter_prefix_bytes")] = (
        declared("dead_letter_prefix_bytes"))
    liveness_timeout_s: Annotated[float, rule("liveness_timeout_s")] = (
        declared("liveness_timeout_s"))
    log_level: Annotated[str, rule("log_level")] = declared("log_level")
    batch_max_events: Annotated[int, rule("batch_max_events")] = declared("batch_max_events")
    batch_within_s: Annotated[float, rule("batch_within_s")] = declared("batch_within_s")
    release_linger_s: Annotated[float, rule("release_linger_s")] = declared("release_linger_s")
    checkpoint_interval_s: Annotated[float, rule("checkpoint_interval_s")] = (
        declared("checkpoint_interval_s"))
    state_commit_interval_s: Annotated[float, rule("state_commit_interval_s")] = (
        declared("state_commit_interval_s"))
    max_unacked_events: Annotated[int, rule("max_unacked_events")] = declared("max_unacked_events")
    latest_interval_s: Annotated[float, rule("latest_interval_s")] = declared("latest_interval_s")
    transaction_timeout_s: Annotated[float, rule("transaction_timeout_s")] = (
        declared("transaction_timeout_s"))
    state_chunk_bytes: Annotated[int, rule("state_chunk_bytes")] = declared("state_chunk_bytes")
    state_sync: Annotated[bool, rule("state_sync")] = declared("state_sync")
    rocksdb_block_cache_bytes: Annotated[int, rule("rocksdb_block_cache_bytes")] = (
        declared("rocksdb_block_cache_bytes"))
    rocksdb_write_buffer_bytes: Annotated[int, rule("rocksdb_write_buffer_bytes")] = (
        declared("rocksdb_write_buffer_bytes"))
    release_max_record_bytes: Annotated[int, rule("release_max_record_bytes")] = (
        declared("release_max_record_bytes"))
    session_timeout_s: Annotated[float, rule("session_timeout_s")] = declared("session_timeout_s")
    max_batch_seconds: Annotated[float, rule("max_batch_seconds")] = declared("max_batch_seconds")
    max_input_message_bytes: Annotated[int, rule("max_input_message_bytes")] = (
        declared("max_input_message_bytes"))
    crash_at: Annotated[Any | None, rule("crash_at")] = declared("crash_at")
    # -- end generated
