"""The worker's configuration: ``DPSYNTH_*`` environment variables over an optional file.

Layer: adapter. :func:`load_config` reads the environment (and ``DPSYNTH_CONFIG_FILE``, JSON or
TOML, whose keys are the variable names without the ``DPSYNTH_`` prefix, in lower case), checks
every value and returns a frozen :class:`WorkerConfig`, or raises :class:`ConfigError` naming
the variable and the fix. The environment wins over the file.

The noise key (``DPSYNTH_NOISE_KEY``, 64 hex characters, or ``DPSYNTH_NOISE_KEY_FILE``) is held
in a :class:`NoiseKey` whose ``repr`` and ``str`` show only its public fingerprint; no message
of this module ever contains the key or any part of it.

>>> env = {"DPSYNTH_NOISE_KEY": "00" * 32, "DPSYNTH_SCHEMA_FILE": "s.json"}
>>> NoiseKey.from_hex(env["DPSYNTH_NOISE_KEY"], "DPSYNTH_NOISE_KEY")
NoiseKey(fingerprint=...)
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise
from dpsynth.schema import Schema
from dpsynth.stream.tabular_engine import TabularSettings, check_tabular, read_tabular_settings

PREFIX = "DPSYNTH_"
#: Kafka's legal topic names: at most 249 of [a-zA-Z0-9._-].
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_HEX_KEY = re.compile(r"^[0-9a-fA-F]{64}$")
CRASH_POINTS = (
    "mid_tick",
    "mid_release",
    "after_release_produced",
    "after_state_commit_before_ack",
)


class NoiseKey:
    """The run's secret noise key (32 bytes). Shows only its public fingerprint.

    The bytes are reachable through :meth:`reveal` only, so that a log line, a traceback or a
    ``repr`` of the configuration can never print them.
    """

    __slots__ = ("__key", "fingerprint")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != 32:
            raise ConfigError("the noise key must be exactly 32 bytes (64 hex characters)")
        self.__key = key
        self.fingerprint = KeyedNoise(key).fingerprint()

    @classmethod
    def from_hex(cls, text: str, source: str) -> NoiseKey:
        """Parse 64 hex characters; ``source`` names the variable or file in errors."""
        text = text.strip()
        if not _HEX_KEY.match(text):
            # privacy: never echo the text, not even its length beyond the rule
            raise ConfigError(
                f"{source} must hold exactly 64 hex characters (32 bytes); generate one with "
                "`python -c 'import secrets; print(secrets.token_hex(32))'`"
            )
        return cls(bytes.fromhex(text))

    def reveal(self) -> bytes:
        """The key bytes, for :class:`~dpsynth.online.synthesizer.OnlineSynthesizer` only."""
        return self.__key

    def __repr__(self) -> str:
        return f"NoiseKey(fingerprint={self.fingerprint})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a NoiseKey cannot be pickled (it would copy the secret)")


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs; built and checked by :func:`load_config`.

    The first group is required (or has a documented default); the second tunes the worker.
    """

    broker: str
    input_topic: str
    output_topic: str
    dead_letter_topic: str
    schema: Schema | None  # the point engine's; None for DPSYNTH_ENGINE=tabular
    schema_file: str
    epsilon: float
    release_every: int
    max_depth: int
    schedule: str
    run_id: str
    data_dir: Path
    noise_key: NoiseKey = field(repr=False)
    web_port: int = 6066
    web_bind: str = "0.0.0.0"  # noqa: S104 - probes and Prometheus reach the pod's IP
    group_id: str = ""
    group_instance_id: str = ""
    # -- tuning ---------------------------------------------------------------------------
    batch_max_events: int = 2000
    batch_within_s: float = 0.1
    release_linger_s: float = 0.2
    checkpoint_interval_s: float = 5.0
    max_unacked_events: int = 20_000
    state_chunk_bytes: int = 256 * 1024
    state_sync: bool = True
    rocksdb_block_cache_bytes: int = 8 * 2**20
    rocksdb_write_buffer_bytes: int = 4 * 2**20
    release_max_record_bytes: int = 256_000
    session_timeout_s: float = 30.0
    log_level: str = "info"
    crash_at: tuple[str, int] | None = None
    # -- engine (DPSYNTH_ENGINE): "points" (schema) or "tabular" (domain, paper 003) ----------
    engine: str = "points"
    tabular: TabularSettings | None = None
    # -- neighbour notion (DPSYNTH_NEIGHBOURS): "replace" or "add_remove" (issue 8) ------------
    neighbours: str = "replace"

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

    def bootstrap_servers(self) -> str:
        """``host:port,host:port`` for confluent-kafka (the Faust URL without ``kafka://``)."""
        return bootstrap_of(self.broker)

    def faust_broker(self) -> str:
        """``kafka://host:port;kafka://host:port`` for Faust."""
        return ";".join(f"kafka://{s}" for s in self.bootstrap_servers().split(","))

    def public_summary(self) -> dict[str, Any]:
        """The settings safe to log: everything except the key (its fingerprint instead)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("noise_key", "schema"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, TabularSettings):
                value = value.summary()
            out[f.name] = str(value) if isinstance(value, Path) else value
        out["key_fingerprint"] = self.noise_key.fingerprint
        out["d"] = self.d
        return out


def bootstrap_of(broker: str) -> str:
    """``kafka://a:9092;kafka://b:9092`` or ``a:9092,b:9092`` → ``a:9092,b:9092``.

    >>> bootstrap_of("kafka://k1:9092;kafka://k2:9092")
    'k1:9092,k2:9092'
    """
    parts = [p.strip() for p in re.split(r"[;,]", broker) if p.strip()]
    return ",".join(p.split("://", 1)[1] if "://" in p else p for p in parts)


# -- reading -------------------------------------------------------------------------------


def _read_file(path: str) -> dict[str, Any]:
    name = f"DPSYNTH_CONFIG_FILE ({path!r})"
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{name} cannot be read ({e.strerror}); fix the path") from None
    try:
        if path.endswith(".toml"):
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        kind = "TOML" if path.endswith(".toml") else "JSON"
        raise ConfigError(f"{name} must be valid {kind}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name} must hold one object/table of settings")
    out = {}
    for key, value in data.items():
        env = PREFIX + str(key).upper()
        if env not in _KNOWN:
            raise ConfigError(
                f"{name}: unknown setting {key!r}; known: {sorted(k.lower() for k in _NAMES)}"
            )
        if env == "DPSYNTH_NOISE_KEY":
            raise ConfigError(
                f"{name} must not hold the noise key: set noise_key_file (a file readable only "
                "by the worker) or the DPSYNTH_NOISE_KEY variable"
            )
        out[env] = value if isinstance(value, str) else json.dumps(value)
    return out


class _Reader:
    """Typed access to the merged settings; every error names the variable and the fix."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values

    def raw(self, name: str) -> str | None:
        value = self.values.get(name)
        if value is None or not str(value).strip():
            return None
        return str(value).strip()

    def required(self, name: str, fix: str) -> str:
        value = self.raw(name)
        if value is None:
            raise ConfigError(f"{name} is not set: {fix}")
        return value

    def integer(self, name: str, default: int, low: int, high: int | None = None) -> int:
        text = self.raw(name)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise ConfigError(f"{name} ({text!r}) must be an integer {bound}; fix it")
        return value

    def number(self, name: str, default: float, low: float, *, strict: bool = False) -> float:
        text = self.raw(name)
        if text is None:
            return default
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (value > low if strict else value >= low)
        if not ok:
            rule = f"> {low:g}" if strict else f">= {low:g}"
            raise ConfigError(f"{name} ({text!r}) must be a finite number {rule}; fix it")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        text = self.raw(name)
        if text is None:
            return default
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name} ({text!r}) must be true or false")

    def topic(self, name: str, default: str) -> str:
        value = self.raw(name) or default
        if not _TOPIC.match(value) or value in (".", ".."):
            raise ConfigError(
                f"{name} ({value!r}) must be a Kafka topic name: 1-249 characters of "
                "[A-Za-z0-9._-]"
            )
        return value


_NAMES = (
    "BROKER", "INPUT_TOPIC", "OUTPUT_TOPIC", "DEAD_LETTER_TOPIC", "SCHEMA_FILE", "EPSILON",
    "RELEASE_EVERY", "MAX_DEPTH", "SCHEDULE", "RUN_ID", "DATA_DIR", "WEB_PORT", "WEB_BIND",
    "GROUP_ID", "GROUP_INSTANCE_ID", "NOISE_KEY", "NOISE_KEY_FILE", "BATCH_MAX_EVENTS",
    "BATCH_WITHIN_S", "RELEASE_LINGER_S", "CHECKPOINT_INTERVAL_S", "MAX_UNACKED_EVENTS",
    "STATE_CHUNK_BYTES", "STATE_SYNC", "ROCKSDB_BLOCK_CACHE_BYTES", "ROCKSDB_WRITE_BUFFER_BYTES",
    "RELEASE_MAX_RECORD_BYTES", "SESSION_TIMEOUT_S", "LOG_LEVEL", "CRASH_AT",
    "ENGINE", "DOMAIN_FILE", "TABULAR_METHOD", "TABULAR_COUNTER", "TABULAR_WORKLOADS_PER_STEP",
    "NEIGHBOURS",
)
_KNOWN = frozenset(PREFIX + n for n in _NAMES)


def _noise_key(r: _Reader) -> NoiseKey:
    inline, path = r.raw("DPSYNTH_NOISE_KEY"), r.raw("DPSYNTH_NOISE_KEY_FILE")
    if inline is not None and path is not None:
        raise ConfigError(
            "DPSYNTH_NOISE_KEY and DPSYNTH_NOISE_KEY_FILE are both set: keep exactly one"
        )
    if inline is not None:
        return NoiseKey.from_hex(inline, "DPSYNTH_NOISE_KEY")
    if path is None:
        raise ConfigError(
            "DPSYNTH_NOISE_KEY is not set: set it to 64 hex characters, or set "
            "DPSYNTH_NOISE_KEY_FILE"
        )
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text(encoding="ascii", errors="strict")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "not ASCII text"
        raise ConfigError(
            f"DPSYNTH_NOISE_KEY_FILE ({path!r}) cannot be read ({reason}); fix the path"
        ) from None
    # Others must not read the key. Group access is how Kubernetes mounts a Secret for a
    # non-root pod (mode 0440 with fsGroup), so it is only worth a warning for a foreign group.
    foreign_group = os.stat(path).st_gid != os.getgid()
    if mode & stat.S_IRWXO or (mode & stat.S_IRWXG and foreign_group):
        import logging

        logging.getLogger(__name__).warning(
            "DPSYNTH_NOISE_KEY_FILE (%s) is readable beyond its owner's group; chmod 600 it", path
        )
    return NoiseKey.from_hex(text, f"DPSYNTH_NOISE_KEY_FILE ({path!r})")


def _crash_at(r: _Reader) -> tuple[str, int] | None:
    text = r.raw("DPSYNTH_CRASH_AT")
    if text is None:
        return None
    point, _, count = text.partition(":")
    if point not in CRASH_POINTS or not count.isdigit() or int(count) < 1:
        raise ConfigError(
            f"DPSYNTH_CRASH_AT ({text!r}) must be POINT:N with N >= 1 and POINT one of "
            f"{CRASH_POINTS} (a test hook: unset it in production)"
        )
    return point, int(count)


def load_config(environ: Mapping[str, str] | None = None) -> WorkerConfig:
    """Read and check the configuration (environment over ``DPSYNTH_CONFIG_FILE``).

    Raises
    ------
    ConfigError
        For the first invalid or missing setting, naming the variable and the fix.
    """
    env = dict(os.environ if environ is None else environ)
    values: dict[str, str] = {}
    config_file = env.get("DPSYNTH_CONFIG_FILE", "").strip()
    if config_file:
        values.update(_read_file(config_file))
    values.update({k: v for k, v in env.items() if k.startswith(PREFIX)})
    r = _Reader(values)

    engine, schema_file, schema, tabular = _engine(r)

    key = _noise_key(r)
    run_id = r.raw("DPSYNTH_RUN_ID") or f"run-{key.fingerprint}"
    if not _RUN_ID.match(run_id):
        raise ConfigError(
            f"DPSYNTH_RUN_ID ({run_id!r}) must be 1-200 characters of [A-Za-z0-9._-]"
        )
    group_id = r.raw("DPSYNTH_GROUP_ID") or ""
    if group_id and not _RUN_ID.match(group_id):
        raise ConfigError(
            f"DPSYNTH_GROUP_ID ({group_id!r}) must be 1-200 characters of [A-Za-z0-9._-]"
        )
    instance_id = r.raw("DPSYNTH_GROUP_INSTANCE_ID") or ""
    if instance_id and not _RUN_ID.match(instance_id):
        raise ConfigError(
            f"DPSYNTH_GROUP_INSTANCE_ID ({instance_id!r}) must be 1-200 characters of "
            "[A-Za-z0-9._-] (e.g. the pod name of a StatefulSet)"
        )
    log_level = (r.raw("DPSYNTH_LOG_LEVEL") or "info").lower()
    if log_level not in ("crit", "error", "warn", "info", "debug"):
        raise ConfigError(
            f"DPSYNTH_LOG_LEVEL ({log_level!r}) must be one of crit, error, warn, info, debug"
        )
    topics = {
        name: r.topic(f"DPSYNTH_{name.upper()}", default)
        for name, default in (
            ("input_topic", "dpsynth-raw-events"),
            ("output_topic", "dpsynth-synthetic"),
            ("dead_letter_topic", "dpsynth-dead-letter"),
        )
    }
    if len(set(topics.values())) != 3:
        raise ConfigError(
            "DPSYNTH_INPUT_TOPIC, DPSYNTH_OUTPUT_TOPIC and DPSYNTH_DEAD_LETTER_TOPIC must be "
            f"three different topics (got {sorted(topics.values())})"
        )
    r.required("DPSYNTH_EPSILON", "set the privacy budget, e.g. DPSYNTH_EPSILON=1.0")
    epsilon = r.number("DPSYNTH_EPSILON", math.nan, 0.0, strict=True)
    config = WorkerConfig(
        broker=r.required(
            "DPSYNTH_BROKER", "set it to the bootstrap servers, e.g. kafka://127.0.0.1:9092"
        ),
        schema=schema,
        schema_file=schema_file,
        epsilon=epsilon,
        release_every=r.integer("DPSYNTH_RELEASE_EVERY", 1000, 1),
        max_depth=r.integer("DPSYNTH_MAX_DEPTH", 20, 0, 63),
        schedule=_schedule(r),
        neighbours=_neighbours(r, engine),
        run_id=run_id,
        data_dir=Path(r.raw("DPSYNTH_DATA_DIR") or "dpsynth-data"),
        noise_key=key,
        web_port=r.integer("DPSYNTH_WEB_PORT", 6066, 1, 65535),
        web_bind=r.raw("DPSYNTH_WEB_BIND") or "0.0.0.0",  # noqa: S104
        group_id=group_id,
        group_instance_id=instance_id,
        batch_max_events=r.integer("DPSYNTH_BATCH_MAX_EVENTS", 2000, 1),
        batch_within_s=r.number("DPSYNTH_BATCH_WITHIN_S", 0.1, 0.0, strict=True),
        release_linger_s=r.number("DPSYNTH_RELEASE_LINGER_S", 0.2, 0.0),
        checkpoint_interval_s=r.number("DPSYNTH_CHECKPOINT_INTERVAL_S", 5.0, 0.0, strict=True),
        max_unacked_events=r.integer("DPSYNTH_MAX_UNACKED_EVENTS", 20_000, 1),
        state_chunk_bytes=r.integer("DPSYNTH_STATE_CHUNK_BYTES", 256 * 1024, 4096, 64 * 2**20),
        state_sync=r.boolean("DPSYNTH_STATE_SYNC", True),
        rocksdb_block_cache_bytes=r.integer("DPSYNTH_ROCKSDB_BLOCK_CACHE_BYTES", 8 * 2**20, 0),
        rocksdb_write_buffer_bytes=r.integer(
            "DPSYNTH_ROCKSDB_WRITE_BUFFER_BYTES", 4 * 2**20, 2**16
        ),
        release_max_record_bytes=r.integer(
            "DPSYNTH_RELEASE_MAX_RECORD_BYTES", 256_000, 1024, 1_000_000
        ),
        session_timeout_s=r.number("DPSYNTH_SESSION_TIMEOUT_S", 30.0, 1.0),
        log_level=log_level,
        crash_at=_crash_at(r),
        engine=engine,
        tabular=tabular,
        **topics,
    )
    if engine == "tabular":
        check_tabular(config)
    else:
        _check_synthesizer(config)
    return config


def _engine(r: _Reader) -> tuple[str, str, Schema | None, TabularSettings | None]:
    """``DPSYNTH_ENGINE`` and its input description: a schema (points) or a domain (tabular)."""
    engine = (r.raw("DPSYNTH_ENGINE") or "points").lower()
    if engine not in ("points", "tabular"):
        raise ConfigError(f"DPSYNTH_ENGINE ({engine!r}) must be 'points' or 'tabular'")
    if engine == "tabular":
        if r.raw("DPSYNTH_SCHEMA_FILE") is not None:
            raise ConfigError(
                "DPSYNTH_SCHEMA_FILE is set but DPSYNTH_ENGINE=tabular reads the records' domain "
                "from DPSYNTH_DOMAIN_FILE: unset DPSYNTH_SCHEMA_FILE (or set DPSYNTH_ENGINE=points)"
            )
        return engine, "", None, read_tabular_settings(r)
    for name in ("DPSYNTH_DOMAIN_FILE", "DPSYNTH_TABULAR_METHOD", "DPSYNTH_TABULAR_COUNTER",
                 "DPSYNTH_TABULAR_WORKLOADS_PER_STEP"):
        if r.raw(name) is not None:
            raise ConfigError(
                f"{name} is set but DPSYNTH_ENGINE is 'points': set DPSYNTH_ENGINE=tabular to "
                f"run the tabular synthesizer, or unset {name}"
            )
    schema_file = r.required(
        "DPSYNTH_SCHEMA_FILE",
        "point it at a schema JSON file (format: schemas/record-schema.v1.json)",
    )
    try:
        schema = Schema.from_json_file(schema_file)
    except OSError as e:
        raise ConfigError(
            f"DPSYNTH_SCHEMA_FILE ({schema_file!r}) cannot be read ({e.strerror}); fix the path"
        ) from None
    except ConfigError as e:
        raise ConfigError(f"DPSYNTH_SCHEMA_FILE ({schema_file!r}): {e}") from None
    return engine, schema_file, schema, None


def default_schedule() -> str:
    """The synthesizer's default ε schedule (``OnlineSynthesizer(schedule=...)``)."""
    import inspect

    from dpsynth.online.synthesizer import OnlineSynthesizer

    return str(inspect.signature(OnlineSynthesizer).parameters["mechanism"].default)


def _schedule(r: _Reader) -> str:
    from dpsynth.online.mechanism import AUTO
    from dpsynth.online.mechanism import MECHANISMS as SCHEDULES

    value = r.raw("DPSYNTH_SCHEDULE") or default_schedule()
    if value not in (AUTO, *SCHEDULES):
        raise ConfigError(f"DPSYNTH_SCHEDULE ({value!r}) must be one of {(AUTO, *SCHEDULES)}")
    return value


def _neighbours(r: _Reader, engine: str) -> str:
    """Each engine's paper notion by default: replacement (points), add/remove (tabular)."""
    from dpsynth.online.blocks import NEIGHBOUR_NOTIONS

    value = r.raw("DPSYNTH_NEIGHBOURS") or ("add_remove" if engine == "tabular" else "replace")
    if value not in NEIGHBOUR_NOTIONS:
        raise ConfigError(f"DPSYNTH_NEIGHBOURS ({value!r}) must be one of {NEIGHBOUR_NOTIONS}")
    if value == "add_remove" and engine != "tabular":  # privacy: P9
        raise ConfigError(
            "DPSYNTH_NEIGHBOURS=add_remove: the point engine ends a step every "
            "DPSYNTH_RELEASE_EVERY records, which reveals the private record count; until steps "
            "come from tick markers on a public clock, run it with DPSYNTH_NEIGHBOURS=replace"
        )
    return value


def _check_synthesizer(config: WorkerConfig) -> None:
    """Build a throwaway synthesizer, so that a bad ε, depth or schedule fails at start."""
    from dpsynth.online.synthesizer import OnlineSynthesizer

    try:
        OnlineSynthesizer(
            config.d, config.epsilon, config.noise_key.reveal(), config.release_every,
            config.schedule, max_depth=config.max_depth, neighbours=config.neighbours,
        )
    except ConfigError as e:
        raise ConfigError(
            "DPSYNTH_EPSILON / DPSYNTH_RELEASE_EVERY / DPSYNTH_MAX_DEPTH / DPSYNTH_SCHEDULE / "
            f"DPSYNTH_NEIGHBOURS: {e}"
        ) from None
