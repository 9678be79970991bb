"""The settings models, generated from the declared parameters (:mod:`dpsynth.params`).

Layer: adapter (pydantic). :class:`SynthesisSettings` holds the synthesis parameters that
``dpsynth run`` and the worker share and builds the :class:`~dpsynth.online.OnlineSynthesizer`;
:class:`WorkerSettings` adds every worker setting (``DPSYNTH_*``), and
:class:`~dpsynth.stream.settings.WorkerConfig` adds the worker's derived settings to it. No
field is written here: each comes from its :class:`~dpsynth.params.Param` (type, default,
rule), so the models cannot drift from the declarations, the commands' options or the docs. A
bad value is refused with :class:`~dpsynth.errors.ConfigError` naming the variable (or option),
the value and the rule (never a key: secrets are :class:`~pydantic.SecretStr`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, SecretStr, ValidationError
from pydantic import create_model as _create_model
from pydantic_settings import BaseSettings, SettingsConfigDict

from dpsynth.errors import ConfigError
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.params import PARAMS, PREFIX, REQUIRED, Param
from dpsynth.schema import Schema

_PY = {"int": int, "float": float, "bool": bool, "text": str, "choice": str, "custom": Any,
       "path": Path}


def env_name(field: str) -> str:
    """The environment variable of a settings field (its parameter's ``env``)."""
    param = PARAMS.get(field)
    return param.env if param is not None else PREFIX + field.upper()


def _field(param: Param, *, by_engine: bool = False) -> tuple[Any, Any]:
    """(annotation, FieldInfo) of ``param``; ``by_engine``: unset until the engine is known."""
    default = None if by_engine and param.engines else param.default
    default = ... if default is REQUIRED else default
    if param.kind == "secret":
        return SecretStr | None, Field(default, alias=param.env, repr=False)
    python: Any = _PY[param.kind]  # a type, or a union of types for pydantic
    if param.optional or default is None:
        python = python | None
    parse = param.parse if not (by_engine and param.engines) else (
        lambda v, parse=param.parse: None if v is None else parse(v))
    return Annotated[python, BeforeValidator(parse)], Field(default, alias=param.env)


def _fields(params: list[Param], *, by_engine: bool = False) -> dict[str, Any]:
    return {p.name: _field(p, by_engine=by_engine) for p in params}


#: The synthesis parameters ``dpsynth run`` and the worker share.
SHARED = [p for p in PARAMS.values()
          if {"run", "worker"} <= p.scopes and p.group == "synthesis"]
#: Every other worker setting.
WORKER_ONLY = [p for p in PARAMS.values() if "worker" in p.scopes and p not in SHARED]


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


# a model built at run time from the declarations is a dynamic base to mypy: misc
class SynthesisSettings(_create_model(  # type: ignore[misc]
        "_SynthesisFields", __config__=ConfigDict(frozen=True, extra="ignore",
                                                   populate_by_name=True),
        **_fields(SHARED))):
    """The online synthesizer's public parameters (``DPSYNTH_EPSILON`` … in the worker)."""

    @classmethod
    def of(cls, *, label: Callable[[str], str] = env_name, **values: Any) -> SynthesisSettings:
        """Validated settings, or a :class:`ConfigError` naming every bad one by ``label``."""
        try:
            return cls(**values)
        except ValidationError as e:
            raise config_error(e, label=label) from None

    def synthesizer(self, d: int, key: bytes, *, partition: int = 0,
                    **options: Any) -> OnlineSynthesizer:
        """The :class:`OnlineSynthesizer` of these settings (``options``: placement, partition…)."""
        units = {name: value for name, value in (
            ("privacy_unit", self.privacy_unit), ("max_contributions", self.max_contributions),
            ("max_contributions_per_step", self.max_contributions_per_step))
            if value not in (None, "record")}  # the synthesizer checks the combination
        return OnlineSynthesizer(
            d, self.epsilon, key, self.release_every, self.mechanism, self.max_depth,
            partition=partition, neighbours=self.neighbours,
            release_growth=self.release_growth, **units, **options,
        )

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


# a dynamic base to mypy, as above: misc
class WorkerSettings(_create_model(  # type: ignore[misc]
        "_WorkerFields", __base__=(SynthesisSettings, BaseSettings),
        **_fields([p for p in SHARED if p.engines], by_engine=True), **_fields(WORKER_ONLY))):
    """Every worker setting, read from ``DPSYNTH_`` + its name in upper case; the settings with
    a default per engine are unset (None) until the engine resolves them."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, frozen=True, extra="ignore", populate_by_name=True,
        case_sensitive=True)
