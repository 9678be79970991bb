"""The run's secret noise key: one loader, one set of rules, for the CLI and the worker.

Layer: core (no I/O beyond reading the key file). The key comes from exactly one of

- ``DPSYNTH_NOISE_KEY``: 64 hex characters (32 bytes);
- ``DPSYNTH_NOISE_KEY_FILE``: a file holding 64 hex characters (whitespace ignored) or exactly
  32 raw bytes; a file readable by others is warned about;

and, where the caller allows it (the embedded commands, never the worker), the public demo key
``bytes(32)`` when neither is set. The key is held in a :class:`NoiseKey`, whose ``repr`` shows
only the public fingerprint; no message of this module contains the key or any part of it.

>>> key = load_noise_key({"DPSYNTH_NOISE_KEY": "00" * 32})
>>> key, key.is_demo
(NoiseKey(fingerprint=...), False)
>>> load_noise_key({}, allow_demo=True).is_demo
True
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpsynth.errors import ConfigError

#: Environment variable holding the run's noise key as 64 hex characters.
KEY_ENV = "DPSYNTH_NOISE_KEY"
#: Environment variable naming a file that holds the key (64 hex characters or 32 raw bytes).
KEY_FILE_ENV = "DPSYNTH_NOISE_KEY_FILE"
#: The fallback of the embedded commands: public, all zeros, for demonstration only.
DEMO_KEY = bytes(32)
_HEX_KEY = re.compile(r"^[0-9a-fA-F]{64}$")
_GENERATE = "`python -c 'import secrets; print(secrets.token_hex(32))'`"


class NoiseKey:
    """The run's secret noise key (32 bytes). Shows only its public fingerprint.

    The bytes are reachable through :meth:`reveal` only, so that a log line, a traceback or a
    ``repr`` of a configuration can never print them.
    """

    __slots__ = ("__key", "fingerprint", "source", "is_demo")

    def __init__(self, key: bytes, *, source: str = "bytes", is_demo: bool = False) -> None:
        if not isinstance(key, bytes) or len(key) != 32:
            raise ConfigError("the noise key must be exactly 32 bytes (64 hex characters)")
        self.__key = key
        from dpsynth.noise import KeyedNoise  # NumPy and Numba only once a key is loaded

        self.fingerprint = KeyedNoise(key).fingerprint()
        self.source = source
        self.is_demo = is_demo

    @classmethod
    def from_hex(cls, text: str, source: str) -> NoiseKey:
        """Parse 64 hex characters; ``source`` names the variable or file in errors."""
        text = text.strip()
        if not _HEX_KEY.match(text):  # privacy: never echo the text
            raise ConfigError(
                f"{source} must hold exactly 64 hex characters (32 bytes); generate one with "
                f"{_GENERATE}"
            )
        return cls(bytes.fromhex(text), source=source)

    def reveal(self) -> bytes:
        """The key bytes, for the synthesizers only."""
        return self.__key

    def label(self) -> str:
        """A printable description: where the key came from and its fingerprint, or the demo."""
        if self.is_demo:
            return (f"public DEMO key bytes(32): not secret, for demonstration only (set "
                    f"{KEY_ENV} or {KEY_FILE_ENV} for a private run)")
        return f"from {self.source} (fingerprint {self.fingerprint})"

    def __repr__(self) -> str:
        return f"NoiseKey(fingerprint={self.fingerprint})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a NoiseKey cannot be pickled (it would copy the secret)")


def read_key_file(path: str | os.PathLike[str]) -> NoiseKey:
    """The key in ``path``: 64 hex characters (whitespace ignored) or exactly 32 raw bytes."""
    name = f"{KEY_FILE_ENV} ({str(path)!r})"
    try:
        info = os.stat(path)
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{name} cannot be read ({e.strerror}); fix the path") from None
    # Others must not read the key. Group access is how Kubernetes mounts a Secret for a
    # non-root pod (mode 0440 with fsGroup), so it is only worth a warning for a foreign group.
    foreign_group = info.st_gid != os.getgid()
    if info.st_mode & stat.S_IRWXO or (info.st_mode & stat.S_IRWXG and foreign_group):
        logging.getLogger(__name__).warning(
            "%s is readable beyond its owner's group; chmod 600 it", KEY_FILE_ENV)
    text = data.strip()
    if len(text) == 64 and _HEX_KEY.match(text.decode("ascii", errors="replace")):
        return NoiseKey(bytes.fromhex(text.decode("ascii")), source=KEY_FILE_ENV)
    if len(data) == 32:
        return NoiseKey(data, source=KEY_FILE_ENV)
    raise ConfigError(
        f"{name} must hold 64 hex characters or exactly 32 raw bytes; write one with "
        f"{_GENERATE} > FILE"
    )


def load_noise_key(environ: Mapping[str, str] | None = None, *,
                   allow_demo: bool = False) -> NoiseKey:
    """The run's key from ``DPSYNTH_NOISE_KEY`` or ``DPSYNTH_NOISE_KEY_FILE`` (module docstring).

    ``allow_demo``: when neither is set, the public :data:`DEMO_KEY` (flagged ``is_demo``)
    instead of :class:`ConfigError`.
    """
    env = os.environ if environ is None else environ
    inline = (env.get(KEY_ENV) or "").strip()
    path = (env.get(KEY_FILE_ENV) or "").strip()
    if inline and path:
        raise ConfigError(f"{KEY_ENV} and {KEY_FILE_ENV} are both set: keep exactly one")
    if inline:
        return NoiseKey.from_hex(inline, KEY_ENV)
    if path:
        return read_key_file(path)
    if allow_demo:
        return NoiseKey(DEMO_KEY, source="demo", is_demo=True)
    raise ConfigError(f"{KEY_ENV} is not set: set it to 64 hex characters, or set {KEY_FILE_ENV}")
