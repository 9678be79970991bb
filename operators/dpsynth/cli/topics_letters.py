"""``dpsynth topics match-letter``: find a message's dead letter with the run's key.

Layer: adapter (click). A dead letter (format 3) names its message by ``hmac_sha256``, an HMAC
under a subkey of the run's noise key (:class:`dpsynth.stream.codecs.DeadLetterHasher`), never
an unsalted hash: only whoever holds the key can match a message to its letter (docs/operator.md
"Dead letters", docs/privacy.md). This command computes that digest of one message (a file of its
bytes, or standard input) under the key of ``DPSYNTH_NOISE_KEY`` or ``DPSYNTH_NOISE_KEY_FILE``,
as the worker reads it, and with ``--recording`` lists the letters of a recorded dead-letter
topic (``dpsynth topics export``) that carry it; a format-2 letter (before issue 44) matches by
its unsalted ``sha256``. It prints the digest, the key's public fingerprint and where the letters
are (their key ``topic/partition/offset`` and reason), never the key, the subkey or a message.

.. code-block:: console

    $ dpsynth topics export --topic dpsynth-dead-letter --out dead.ndjson.gz
    $ dpsynth topics match-letter message.bin --recording dead.ndjson.gz
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import click

from dpsynth.cli.errors import fail_on_dpsynth_error
from dpsynth.client.recording import RecordingReader
from dpsynth.keys import load_noise_key
from dpsynth.stream.codecs import DeadLetterHasher, decode_dead_letter


def _letters(recording: str, value: bytes, hasher: DeadLetterHasher
             ) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The letters of ``recording`` that name ``value``, and a count of those that cannot."""
    keyed, plain = hasher.digest(value), hashlib.sha256(value).hexdigest()
    found: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    with RecordingReader(recording) as reader:
        for record in reader:
            try:
                letter = decode_dead_letter(record.value or b"")
            except ValueError:
                skipped["records that are not dead letters"] += 1
                continue
            if letter["format"] == 2:
                if letter.get("sha256") == plain:
                    found.append(letter)
            elif letter.get("key_fingerprint") != hasher.key_fingerprint:
                skipped["letters written under another key"] += 1
            elif letter.get("hmac_sha256") == keyed:
                found.append(letter)
    return found, skipped


@click.command(name="match-letter")
@click.argument("message", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--recording", type=click.Path(exists=True, dir_okay=False),
              help="A recording of the dead-letter topic (dpsynth topics export): list the "
                   "letters of MESSAGE in it.")
@fail_on_dpsynth_error
def match_letter(message: str, recording: str | None) -> None:
    """Print the keyed digest (hmac_sha256) that the dead letter of MESSAGE (a file of the
    message's bytes, '-' for standard input) carries under the run's key (DPSYNTH_NOISE_KEY or
    DPSYNTH_NOISE_KEY_FILE); with --recording, the letters that carry it."""
    value = click.get_binary_stream("stdin").read() if message == "-" else \
        Path(message).read_bytes()
    hasher = DeadLetterHasher(load_noise_key())
    click.echo(f"hmac_sha256 {hasher.digest(value)} (key fingerprint {hasher.key_fingerprint})")
    if recording is None:
        return
    found, skipped = _letters(recording, value, hasher)
    for letter in found:
        click.echo(f"{letter['topic']}/{letter['partition']}/{letter['offset']}: format "
                   f"{letter['format']}, {letter.get('n_rejects')} of {letter.get('n_records')} "
                   f"records rejected: {letter.get('reason')}")
    for what, n in sorted(skipped.items()):
        click.echo(f"skipped {n:,} {what}", err=True)
    if not found:
        click.echo(f"no letter in {recording} names this message: check that it is the "
                   "message's exact bytes and the run's key", err=True)
