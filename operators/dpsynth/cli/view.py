"""``dpsynth view``: the live page of a synthetic topic or of a ``dpsynth run`` folder.

Layer: adapter. Starts a follower (:mod:`dpsynth.view.sources`) and the read-only HTTP server
(:mod:`dpsynth.view.server`) on 127.0.0.1 by default, prints the address, and serves until
interrupted.

.. code-block:: console

    $ dpsynth view --bootstrap localhost:29092 --topic dpsynth-synthetic \\
        --schema schemas/example-schema.json
    $ dpsynth view --folder dpsynth-out          # OUT/releases and OUT/schema.json of a run
"""

from __future__ import annotations

import threading
from pathlib import Path

import click

from dpsynth.cli.errors import fail_on_dpsynth_error
from dpsynth.cli.kafka import bootstrap_option, kafka_module, resolve_bootstrap
from dpsynth.schema import Schema
from dpsynth.view import FolderFollower, TopicFollower, ViewServer, ViewState
from dpsynth.view.sources import Follower


def _folder(folder: Path, schema_path: Path | None) -> tuple[Path, Schema | None]:
    """The release files' folder and the schema: FOLDER/releases and FOLDER/schema.json of a
    run, or the folder itself."""
    releases = folder / "releases" if (folder / "releases").is_dir() else folder
    if schema_path is None and (folder / "schema.json").is_file():
        schema_path = folder / "schema.json"
    return releases, None if schema_path is None else Schema.from_json_file(schema_path)


@click.command()
@bootstrap_option
@click.option("--topic", help="The synthetic topic to follow (from its beginning).")
@click.option("--folder", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Or a folder of release files: the --out of `dpsynth run` (its releases/ "
                   "and schema.json), or any folder of release-*.bin.")
@click.option("--schema", "schema_path", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path),
              help="The run's record schema: units, column names and bounds on the axes "
                   "(without one: coordinates in [0,1]).")
@click.option("--run-id", help="Only this run (default: the run of the latest release).")
@click.option("--axes", help="The two columns of the heat maps, NAME,NAME (default: the "
                             "first two).")
@click.option("--bins", type=click.IntRange(8, 256), default=64, show_default=True,
              help="Cells per axis of the heat maps.")
@click.option("--poll-ms", type=click.IntRange(100, 60_000), default=1000, show_default=True,
              help="How often the page asks for news.")
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address to listen on (the page is read-only; 0.0.0.0 shares it).")
@click.option("--port", type=click.IntRange(0, 65535), default=8050, show_default=True,
              help="Port (0: any free one).")
@fail_on_dpsynth_error
def view(bootstrap: str | None, topic: str | None, folder: Path | None,
         schema_path: Path | None, run_id: str | None, axes: str | None, bins: int,
         poll_ms: int, bind: str, port: int) -> None:
    """Serve a live, read-only page of a synthetic topic or release folder: heat maps of the
    latest releases in units, release sizes over time, privacy metadata."""
    if (topic is None) == (folder is None):
        raise click.UsageError("give --topic (with --bootstrap) or --folder")
    schema = None if schema_path is None else Schema.from_json_file(schema_path)
    if folder is not None:
        folder, schema = _folder(folder, schema_path)
    names = tuple(a.strip() for a in axes.split(",")) if axes else ()
    if names and (len(names) > 2 or (schema is not None and not set(names) <= set(schema.names))):
        raise click.UsageError(f"--axes {axes!r}: name one or two columns of the schema "
                               f"({', '.join(schema.names) if schema else 'x0, x1, …'})")
    label = f"topic {topic}" if topic is not None else f"folder {folder}"
    state = ViewState(label, schema=schema, axes=names, bins=bins, run_id=run_id,
                      poll_ms=poll_ms)
    follower: Follower
    if topic is not None:
        kafka_module()
        try:
            follower = TopicFollower(state, resolve_bootstrap(bootstrap), topic, run_id=run_id)
        except ValueError as e:
            raise click.ClickException(str(e)) from None
    else:
        assert folder is not None
        follower = FolderFollower(state, folder, run_id=run_id)
    server = ViewServer(state, bind, port)
    follower.start()
    server.start()
    click.echo(f"dpsynth view of {label}: {server.url} (read-only; Ctrl-C stops)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        follower.stop()
