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
"""

from __future__ import annotations

import click

from dpsynth.cli.audit import audit
from dpsynth.cli.consume import consume
from dpsynth.cli.demo import demo
from dpsynth.cli.inspect import evaluate, inspect
from dpsynth.cli.offline import offline
from dpsynth.cli.produce import produce
from dpsynth.cli.run import run
from dpsynth.cli.tabular import tabular
from dpsynth.cli.topics import topics
from dpsynth.cli.worker import worker
from dpsynth.keys import DEMO_KEY, KEY_ENV, KEY_FILE_ENV

__all__ = ["DEMO_KEY", "KEY_ENV", "KEY_FILE_ENV", "main"]


@click.group()
@click.version_option(package_name="dpsynth")
def main() -> None:
    """dpsynth: differentially private synthetic data streams (He–Vershynin–Zhu)."""


for command in (run, inspect, evaluate, demo, offline, tabular, worker, produce, consume,
                topics, audit):
    main.add_command(command)
#: ``dpsynth snapshot``: the offline command's name before 0.2 ("snapshot" now means saved state).
main.add_command(click.Command("snapshot", callback=offline.callback, params=offline.params,
                               help=offline.help, hidden=True))
