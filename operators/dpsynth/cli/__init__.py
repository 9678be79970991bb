"""The ``dpsynth`` command line: the embedded run, release inspection and evaluation, the worker.

Layer: adapter (the core never imports it). Commands:

``dpsynth run [--input FILE [--schema S] | --dataset gowalla] [--epsilon E] [--release-every N]``
    The online synthesizer embedded, no Kafka: reads a CSV/NDJSON file, a data set from
    ``../shared/data`` or (the default) a generated stream of drifting Gaussian blobs; writes
    every release to ``DIR/releases/release-{sequence:06d}.bin`` (release format v1), rejected
    records to ``DIR/dead-letter.ndjson`` (index and reason, never the value), and
    ``DIR/summary.json``, ``DIR/true-vs-synthetic.png``, ``DIR/w1-over-t.png``.
``dpsynth inspect PATH [--points N] [--schema S]``
    A release file's header, metadata, t, depth and non-empty leaves; optionally its first points.
``dpsynth eval RELEASE [--input FILE [--schema S] | --dataset …]``
    A release against the first t records of its input: W1 (exact or subsampled, tree upper,
    sliced lower), the i.i.d. floor and range-query errors.
``dpsynth offline --input FILE [--schema S] --mechanism pmm|psmm|lowdim --out OUT.csv|.ndjson``
    One offline ε-DP synthetic copy of a file (:mod:`dpsynth.cli.offline`, docs/offline.md).
``dpsynth topics create [--partitions P] [--replication-factor R]``
    The worker's three topics with partitions, replication, retention and size limits that fit
    releases (:mod:`dpsynth.cli.topics_create`).
``dpsynth topics export --topic T [--out FILE]`` and ``dpsynth topics import FILE [--topic T]``
    A topic (synthetic, raw or dead-letter) to a recording file and back
    (:mod:`dpsynth.cli.topics_io`, ``schemas/recording.v1.json``).
``dpsynth topics match-letter MESSAGE [--recording DEAD]``
    The keyed digest a message's dead letter carries under the run's key, and the letters of a
    recorded dead-letter topic that carry it (:mod:`dpsynth.cli.topics_letters`).
``dpsynth view --topic T [--schema S] | --folder OUT``
    A live, read-only page on 127.0.0.1 of a synthetic topic or a run's folder: heat maps of
    the latest releases in units, release sizes, privacy metadata (:mod:`dpsynth.cli.view`).
``dpsynth audit [PATTERN …] [--keys N]``
    The neighbour audit of every public entry point (:mod:`dpsynth.cli.audit`, P14).
``dpsynth demo [--out DIR] [--ticks N]``
    The counters of one tree level on a generated stream (the first end-to-end demo, kept).

Example
-------
.. code-block:: console

    $ dpsynth run --out dpsynth-out
    $ dpsynth inspect dpsynth-out/releases/release-000020.bin --points 5
    $ dpsynth eval dpsynth-out/releases/release-000020.bin
    $ export DPSYNTH_NOISE_KEY=$(python -c 'import secrets; print(secrets.token_hex(32))')
    $ dpsynth run --input events.csv --schema schemas/example-schema.json --out private-out

The key comes from ``DPSYNTH_NOISE_KEY`` (64 hex characters) or ``DPSYNTH_NOISE_KEY_FILE``,
else the public demo key ``bytes(32)`` with a warning. It is never printed or written: only its
public fingerprint (:meth:`KeyedNoise.fingerprint`).

The summary, the plots and ``dpsynth eval`` compare releases with the raw input: they are
evaluation artefacts, not private, and must not be published. Only the releases are ε-DP.
Standard output carries only what the run's notion makes public (settings, the key's
fingerprint, release counts and sizes, paths); counts of the raw input, rejection reasons,
clipping and evaluation go to standard error, labelled as operator diagnostics.

Exit status: one table for every command (:mod:`dpsynth.cli.errors`, docs/cli.md).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

import click

from dpsynth.cli.errors import EXIT_STATUS_HELP, RuntimeFailure
from dpsynth.keys import DEMO_KEY, KEY_ENV, KEY_FILE_ENV

__all__ = ["DEMO_KEY", "KEY_ENV", "KEY_FILE_ENV", "main"]

#: Each command: (module, attribute, one line of help). Imported only when run or asked for
#: its own help, so ``dpsynth --help`` and ``--version`` import neither NumPy nor Numba.
COMMANDS = {
    "run": ("run", "run", "Run the online synthesizer embedded (no Kafka): releases, summary, "
            "plots."),
    "inspect": ("inspect", "inspect", "Print a release file's header, metadata and leaves."),
    "eval": ("inspect", "evaluate", "Evaluate a release against the records behind it."),
    "demo": ("demo", "demo", "Feed a generated stream to the counters of one tree level."),
    "offline": ("offline", "offline", "Offline ε-DP synthetic copy of a CSV/NDJSON file."),
    "tabular": ("tabular", "tabular", "Synthetic tables over a finite domain (paper 003)."),
    "worker": ("worker", "worker", "Run the Kafka worker: raw events in, DP releases out."),
    "produce": ("produce", "produce", "Send records to the raw-events topic as msgpack."),
    "consume": ("consume", "consume", "Reassemble releases from the synthetic topic."),
    "topics": ("topics", "topics", "Create the worker's topics; export or import a recording; "
               "match a dead letter."),
    "audit": ("audit", "audit", "Run entry points on neighbouring inputs; fail on any leak."),
    "view": ("view", "view", "A live, read-only web page of a synthetic topic or release "
             "folder."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (:data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute, _ = COMMANDS[name]
        command: click.Command = getattr(importlib.import_module(f"dpsynth.cli.{module}"),
                                         attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, text) for name, (_, _, text) in COMMANDS.items()])

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an exception none of them handles is exit status 3, traceback shown."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort,
                SystemExit, KeyboardInterrupt):
            raise
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise RuntimeFailure(f"internal error ({type(e).__name__}); this is a bug: please "
                                 "report it with the traceback above") from None


@click.group(cls=LazyGroup, epilog=EXIT_STATUS_HELP)
@click.version_option(package_name="dpsynth")
def main() -> None:
    """dpsynth: differentially private synthetic data streams (He–Vershynin–Zhu)."""
