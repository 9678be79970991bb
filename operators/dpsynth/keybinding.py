"""A noise key bound to the one run it made: the same key over another input is refused (P13).

Layer: core (standard library; files in the state directory only). Noise is derived from the
key (P2), so two runs with one key over inputs that differ draw the same noise, and the
difference of their releases shows the difference of the inputs without noise. A run therefore
records what it ran over, the first time a key is used, and a later run with that key must
match the record or stop (:class:`~dpsynth.errors.ConfigError` naming the fix: a new key).

The record is ``STATE/keys/<key fingerprint>.json`` in the state directory
(:func:`state_dir`: ``DPSYNTH_STATE_DIR``, else ``$XDG_STATE_HOME/dpsynth``, else
``~/.local/state/dpsynth``) — outside every output directory, so that deleting or reusing an
``--out`` does not forget it. It holds the key's public fingerprint, never the key, and for
files only HMACs under the key of what was read (the input's SHA-256 and the settings), so it
tells nothing about the data to whoever lacks the key. The public demo key is exempt: it is
not secret, its releases protect nothing.

What is bound: for the commands (:func:`bind_key`), the input (the bytes read from its file,
pipe or FIFO, or the data set or generated stream, and which of its records are read:
``--limit``) and the settings that shape the releases (ε, mechanism, notion, steps, schema,
bounds …), per key; for the worker, its input topic (:mod:`dpsynth.stream.runcheck`). What is
not caught: a key used on another machine or with another state directory, a state directory
deleted, a key used with the library directly (no synthesizer calls :func:`bind_key`). It
guards against mistakes, not against an operator who means to reuse a key.

>>> import tempfile
>>> from dpsynth.keys import NoiseKey
>>> key, where = NoiseKey(bytes(range(32)), source="test"), Path(tempfile.mkdtemp())
>>> _ = bind_key(key, KeyUse("run over a.csv", {"file": "aa"}, {"epsilon": 1.0}), where)
>>> _ = bind_key(key, KeyUse("run over a.csv", {"file": "aa"}, {"epsilon": 1.0}), where)
>>> bind_key(key, KeyUse("run over b.csv", {"file": "bb"}, {"epsilon": 1.0}), where)
Traceback (most recent call last):
...
dpsynth.errors.ConfigError: the noise key (fingerprint ...) already ran over another input ...
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpsynth.errors import ConfigError
from dpsynth.keys import KEY_ENV, NoiseKey

#: Environment variable naming the state directory (the key records live in ``keys/``).
STATE_DIR_ENV = "DPSYNTH_STATE_DIR"
#: The command that makes a new key, as the refusals print it.
NEW_KEY = f"export {KEY_ENV}=$(python -c 'import secrets; print(secrets.token_hex(32))')"
_VERSION = 1


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``DPSYNTH_STATE_DIR``, else ``$XDG_STATE_HOME/dpsynth``, else ``~/.local/state/dpsynth``."""
    env = os.environ if environ is None else environ
    if env.get(STATE_DIR_ENV, "").strip():
        return Path(env[STATE_DIR_ENV].strip()).expanduser()
    base = env.get("XDG_STATE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".local" / "state") / "dpsynth"


@dataclass(frozen=True)
class KeyUse:
    """One use of a key: a printable description, what was read, and the settings.

    ``input`` and ``settings`` are JSON-able mappings; only HMACs of them are stored.
    """

    what: str
    input: Mapping[str, Any]
    settings: Mapping[str, Any] = field(default_factory=dict)


def _mac(key: NoiseKey, label: str, value: Mapping[str, Any]) -> str:
    """HMAC-SHA256 under the key of a canonical JSON of ``value``, domain-separated by label."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    message = b"dpsynth key binding v1\x00" + label.encode() + b"\x00" + text.encode()
    return hmac.new(key.reveal(), message, hashlib.sha256).hexdigest()


def record_path(key: NoiseKey, directory: Path | None = None) -> Path:
    """Where the record of ``key`` lives (named by its public fingerprint)."""
    return (state_dir() if directory is None else directory) / "keys" / f"{key.fingerprint}.json"


@contextlib.contextmanager
def locked_record(key: NoiseKey, directory: Path | None = None
                  ) -> Iterator[tuple[Path, dict[str, Any] | None]]:
    """The key's record (None if the key was never used), under an exclusive lock.

    Raises OSError where the state directory cannot be created or written.
    """
    path = record_path(key, directory)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        except (ValueError, UnicodeDecodeError):
            raise ConfigError(f"{path} is not a key record (corrupt JSON); remove it only if "
                              "this key never ran over any other input") from None
        yield path, record


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    """Write a key record atomically (a reader sees the old or the new record, whole)."""
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, path)


def new_record(key: NoiseKey, what: str, **binding: Any) -> dict[str, Any]:
    """A record binding ``key`` (by fingerprint) to ``binding``, stamped now."""
    return {"version": _VERSION, "key_fingerprint": key.fingerprint, "what": what,
            "bound_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **binding}


def refusal(key: NoiseKey, record: Mapping[str, Any], path: Path, difference: str) -> str:
    """The message of a refused key: what differs, what it ran over, and the fix."""
    return (f"the noise key (fingerprint {key.fingerprint}) already ran over {difference} "
            f"({record.get('what', '?')}, {record.get('bound_at', '?')}; recorded in {path}). "
            "One key over two inputs or two settings lets the difference of their releases "
            "be read without noise (docs/privacy.md P13). Start a new run with a new key: "
            f"{NEW_KEY}. To recompute that run, give it the same input and settings.")


def bind_key(key: NoiseKey, use: KeyUse, directory: Path | None = None) -> Path | None:
    """Bind ``key`` to ``use`` the first time; afterwards refuse any other input or settings.

    Returns the record's path, or None for the public demo key (exempt). Raises ConfigError
    (the refusal, naming the fix) and OSError (the state directory is not writable).
    """
    if key.is_demo:
        return None
    binding = {"command_input": _mac(key, "input", use.input),
               "command_settings": _mac(key, "settings", use.settings)}
    with locked_record(key, directory) as (path, record):
        if record is None:
            write_record(path, new_record(key, use.what, **binding))
            return path
        if record.get("command_input") != binding["command_input"]:
            raise ConfigError(refusal(key, record, path, "another input"))
        if record.get("command_settings") != binding["command_settings"]:
            raise ConfigError(refusal(key, record, path, "this input with other settings"))
    return path
