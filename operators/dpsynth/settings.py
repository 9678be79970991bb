"""Settings shared by the CLI and the worker: one pydantic model of the synthesis parameters.

Layer: adapter (pydantic). :class:`SynthesisSettings` declares each parameter once — its type,
default and rule — and builds the :class:`~dpsynth.online.OnlineSynthesizer`; the worker's
:class:`~dpsynth.stream.settings.WorkerConfig` extends it with the Kafka settings, and
``dpsynth run`` fills it from its options. Every field's environment name is ``DPSYNTH_`` + its
name in upper case; a bad value is refused with :class:`~dpsynth.errors.ConfigError` naming
that variable, the value and the rule (never a key: secrets are :class:`~pydantic.SecretStr`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from dpsynth.accounting import PRIVACY_UNITS
from dpsynth.bounding import MAX_CONTRIBUTIONS
from dpsynth.errors import ConfigError
from dpsynth.online.mechanism import AUTO, MECHANISMS, NEIGHBOUR_NOTIONS
from dpsynth.online.synthesizer import DEFAULT_MAX_DEPTH, OnlineSynthesizer
from dpsynth.schema import Schema

PREFIX = "DPSYNTH_"


def env_name(field: str) -> str:
    """The environment variable of a settings field: ``DPSYNTH_`` + its name in upper case."""
    return PREFIX + field.upper()


def integer(low: int, high: int | None = None) -> BeforeValidator:
    """An integer in [low, high] (or ≥ low), parsed from text or a number."""
    def check(value: Any) -> int:
        try:
            number = int(str(value).strip()) if not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None or number < low or (high is not None and number > high):
            bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise ValueError(f"must be an integer {bound}; fix it")
        return number
    return BeforeValidator(check)


def optional_integer(low: int, high: int) -> BeforeValidator:
    """Unset (None or empty) or an integer in [low, high]."""
    check = integer(low, high).func
    return BeforeValidator(lambda v: None if v is None or str(v).strip() == "" else check(v))


def number(low: float, *, strict: bool = False) -> BeforeValidator:
    """A finite number ≥ low (> low when ``strict``)."""
    def check(value: Any) -> float:
        try:
            x = float(str(value).strip()) if not isinstance(value, bool) else math.nan
        except ValueError:
            x = math.nan
        if not (math.isfinite(x) and (x > low if strict else x >= low)):
            raise ValueError(f"must be a finite number {'>' if strict else '>='} {low:g}; fix it")
        return x
    return BeforeValidator(check)


def boolean() -> BeforeValidator:
    """true/false, yes/no, on/off, 1/0."""
    def check(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError("must be true or false")
    return BeforeValidator(check)


def choice(options: tuple[str, ...], *, lower: bool = False) -> BeforeValidator:
    """One of ``options``."""
    def check(value: Any) -> str:
        text = str(value).strip()
        text = text.lower() if lower else text
        if text not in options:
            raise ValueError(f"must be one of {options}")
        return text
    return BeforeValidator(check)


def matching(test: Callable[[str], bool], rule: str) -> BeforeValidator:
    """Text for which ``test`` holds; ``rule`` says what is allowed."""
    def check(value: Any) -> str:
        text = str(value).strip()
        if not test(text):
            raise ValueError(rule)
        return text
    return BeforeValidator(check)


def option_name(field: str) -> str:
    """The command-line option of a settings field: ``--release-every``."""
    return "--" + field.replace("_", "-")


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
        name = field if field.startswith(PREFIX) else label(field) if field else ""
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


#: The online algorithm's name (``"auto"`` resolves per d and notion).
Mechanism = Annotated[str, choice((AUTO, *MECHANISMS))]
#: The neighbour notion.
Neighbours = Annotated[str, choice(NEIGHBOUR_NOTIONS)]
#: The privacy unit (docs/privacy.md P15).
PrivacyUnit = Annotated[str, choice(PRIVACY_UNITS, lower=True)]
#: An optional bound on a user's records: unset, or an integer in [1, MAX_CONTRIBUTIONS].
Bound = Annotated[int | None, optional_integer(1, MAX_CONTRIBUTIONS)]


class SynthesisSettings(BaseModel):
    """The online synthesizer's public parameters (``DPSYNTH_EPSILON`` … in the worker)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    epsilon: Annotated[float, number(0.0, strict=True)]
    release_every: Annotated[int, integer(1)] = 1000
    max_depth: Annotated[int, integer(0, 63)] = DEFAULT_MAX_DEPTH
    mechanism: Mechanism = AUTO
    neighbours: Neighbours = "replace"
    #: ``user``: ε per user, the first ``max_contributions`` records of each user counted.
    privacy_unit: PrivacyUnit = "record"
    max_contributions: Bound = None
    max_contributions_per_step: Bound = None
    #: The field of each record holding its user id (else the schema's ``user_column``).
    user_column: str = ""

    @classmethod
    def of(cls, *, label: Callable[[str], str] = env_name, **values: Any) -> SynthesisSettings:
        """Validated settings, or a :class:`ConfigError` naming every bad one by ``label``."""
        try:
            return cls(**values)
        except ValidationError as e:
            raise config_error(e, label=label) from None

    def synthesizer(self, d: int, key: bytes, *, partition: int = 0,
                    **options: Any) -> OnlineSynthesizer:
        """The :class:`OnlineSynthesizer` of these settings (``options``: placement, fresh…)."""
        units = {name: value for name, value in (
            ("privacy_unit", self.privacy_unit), ("max_contributions", self.max_contributions),
            ("max_contributions_per_step", self.max_contributions_per_step))
            if value not in (None, "record")}  # the synthesizer checks the combination
        return OnlineSynthesizer(
            d, self.epsilon, key, self.release_every, self.mechanism, self.max_depth,
            partition=partition, neighbours=self.neighbours, **units, **options,
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
