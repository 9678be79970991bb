"""Exceptions of dpsynth: one root, builtin bases mixed in where callers expect them.

Layer: core. Messages follow "`name` (value) must …", then the fix. They may name parameters and
public quantities (t, a level, ε, a cell index), never a record's value, a count or key material.
"""

from __future__ import annotations


class DpsynthError(Exception):
    """Root of every error raised by dpsynth."""


class ConfigError(DpsynthError, ValueError):
    """A parameter or setting is invalid; the message names it and the fix."""


class BudgetExceededError(ConfigError):
    """A privacy schedule spends more than its ε on one replaced record."""


class SchemaError(DpsynthError, ValueError):
    """A record or point does not fit the declared schema."""


class StateCorruptError(DpsynthError):
    """A snapshot cannot be restored (wrong version, truncated or tampered)."""
