"""What the embedded commands share: the noise key, the input sources, plots, error handling.

Layer: adapter. Inputs are a CSV/NDJSON file under a declared schema (or a CSV header's columns,
never inferred from values), a data set of ``DPSYNTH_DATA_DIR``, or the generated stream.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console

from dpsynth import datasets
from dpsynth.bounding import split_user_records
from dpsynth.cli.errors import InputError
from dpsynth.errors import ConfigError
from dpsynth.keybinding import STATE_DIR_ENV, KeyUse, bind_key, state_dir
from dpsynth.keys import NoiseKey, load_noise_key
from dpsynth.schema import ClipReport, Column, Schema
from dpsynth.settings import SynthesisSettings, option_name

# `dpsynth run` defaults: a generated d = 2 stream, small enough to finish in seconds.
RUN_POINTS = 20_000


# -- the noise key -------------------------------------------------------------------------------


def resolve_key() -> NoiseKey:
    """The run's noise key (:func:`dpsynth.keys.load_noise_key`), the public demo key if unset.

    Errors (exit status 1) name the variable and the fix and never echo the key.
    """
    try:
        return load_noise_key(allow_demo=True)
    except ConfigError as e:
        raise InputError(str(e)) from None


def print_key(console: Console, key: NoiseKey) -> None:
    """One line naming the key by its fingerprint; a warning for the public demo key."""
    if key.is_demo:
        console.print(f"[bold yellow]WARNING[/]: noise key is the {key.label()}")
    else:
        console.print(f"noise key: {key.label()}")


def bind_key_to_input(key: NoiseKey, what: str, source_identity: dict[str, Any],
                      params: dict[str, Any], not_settings: tuple[str, ...],
                      setting_files: Mapping[str, str] | None = None) -> None:
    """Bind ``key`` to this run's input and settings, or stop (exit status 1) naming the fix.

    ``params`` are the command's options; those in ``not_settings`` (where outputs go, what is
    evaluated, the input's own options, already in ``source_identity``) do not shape the
    releases. A file named by a setting (a schema, a domain) counts by the bytes the command
    read and parsed: ``setting_files`` maps its option's parameter name to their digest
    (:attr:`ReadFile.digest`); it is never opened again here. docs/privacy.md P13; a state
    directory that cannot be written is warned about, not fatal.
    """
    files = setting_files or {}
    settings = {name: _setting(name, value, files) for name, value in params.items()
                if name not in not_settings}
    try:
        bind_key(key, KeyUse(what, source_identity, settings))
    except ConfigError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        stderr_console().print(
            f"[bold yellow]WARNING[/]: the key's binding to its input could not be recorded in "
            f"{state_dir()} ({e.strerror}); set {STATE_DIR_ENV} to a writable directory, or "
            "this key is not checked against reuse over another input (docs/privacy.md P13)")


def _setting(name: str, value: Any, setting_files: Mapping[str, str]) -> Any:
    """A setting as bound: a file by the digest of the bytes the command read (P13).

    Re-opening the path would bind other bytes than those parsed: a pipe or FIFO already read
    is empty (or blocks), a regular file may have changed since.
    """
    if not isinstance(value, Path):
        return value
    if name not in setting_files:
        raise TypeError(f"bind_key_to_input: the setting {name} names a file; read it once with "
                        f"read_once() and pass setting_files={{{name!r}: file.digest}}")
    return setting_files[name]


def stderr_console() -> Console:
    """The console of operator diagnostics, warnings and progress: standard error."""
    return Console(stderr=True)


def figure(width: float, height: float) -> Any:
    """A matplotlib figure on the Agg canvas (no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


# -- inputs --------------------------------------------------------------------------------------


@dataclass
class Source:
    """One input of ``run`` or ``eval``: records and their schema, or points in [0,1]^d."""

    label: str
    names: tuple[str, ...]
    #: What the run reads, for the key's binding to its input (docs/privacy.md P13).
    identity: dict[str, Any] = field(default_factory=dict)
    #: The digests of the files named by settings (the schema) as read, by parameter name
    #: (:func:`bind_key_to_input`'s ``setting_files``, P13).
    setting_files: dict[str, str] = field(default_factory=dict)
    #: Loud warnings about how the input is read (standard error).
    warnings: list[str] = field(default_factory=list)
    schema: Schema | None = None  # maps ``records`` to [0,1]^d
    records: list[Any] | None = None
    points: np.ndarray | None = None  # already in [0,1]^d
    units: Schema | None = None  # the user's schema: points back to original units
    users: np.ndarray | None = None  # the user of each of ``points`` (privacy unit "user")

    @property
    def n(self) -> int:
        """Number of input records (valid or not)."""
        if self.records is not None:
            return len(self.records)
        return 0 if self.points is None else len(self.points)

    @property
    def d(self) -> int:
        """Dimension of the points."""
        return len(self.names)

    def batches(self, size: int) -> Iterator[tuple[
            int, np.ndarray, ClipReport | None, list[tuple[int, str]], Any]]:
        """(records in the batch, valid points, clip report, rejects with input indices, the
        valid records' users or None)."""
        for start in range(0, self.n, size):
            if self.records is None:
                assert self.points is not None  # n > 0: records or points
                chunk = self.points[start:start + size]
                users = None if self.users is None else self.users[start:start + size]
                yield len(chunk), chunk, None, [], users
                continue
            part = self.records[start:start + size]
            schema = self.schema
            assert schema is not None  # records come with their schema
            points, report, rejects, ids = (split_user_records(schema, part)
                                            if schema.user_column else
                                            (*schema.split_valid(part), None))
            yield len(part), points, report, [(start + i, why) for i, why in rejects], ids

    def valid_points(self) -> np.ndarray:
        """All valid records as points in [0,1]^d, in input order (what the synthesizer sees)."""
        parts = [batch[1] for batch in self.batches(50_000)]
        return np.concatenate(parts) if parts else np.zeros((0, self.d))


def _csv_value(text: str) -> Any:
    """A CSV cell as a float when it parses as one, else the text (rejected by the schema)."""
    try:
        return float(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class ReadFile:
    """The bytes of a file named on the command line, read once, and their SHA-256.

    Commands parse ``data`` and bind the key to ``digest`` (docs/privacy.md P13): the digest is
    of the bytes parsed, whatever the path is — a regular file, a pipe (``/dev/stdin``) or a
    named FIFO, none of which may be read twice.
    """

    path: Path
    data: bytes
    #: SHA-256 of ``data`` (hex): for a regular file, that of the file.
    digest: str


def read_once(path: Path) -> ReadFile:
    """Read ``path`` whole, opening it once (P13: what is bound is what was read).

    A pipe or FIFO re-opened after it was read is empty or blocks, so a digest taken by opening
    the path again would bind every pipe to the same empty input. A file that cannot be read is
    :class:`InputError` (exit status 1) naming it.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path} cannot be read ({e.strerror}); give a readable file, "
                         "or /dev/stdin for standard input") from None
    return ReadFile(path, data, hashlib.sha256(data).hexdigest())


def read_json(file: ReadFile, what: str) -> Any:
    """The JSON value of a file read by :func:`read_once` (a schema, a domain).

    A file that is not UTF-8 JSON is :class:`InputError` (exit status 1) naming it and ``what``.
    """
    try:
        return json.loads(file.data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f" at line {e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
        reason = e.msg if isinstance(e, json.JSONDecodeError) else e.reason
        raise InputError(f"{what} file {file.path} must be valid UTF-8 JSON ({reason}{where}); "
                         "fix it (schemas/ holds the formats)") from None


def read_records(path: Path, text_columns: tuple[str, ...] = ()) -> list[Any]:
    """Records of a CSV file with a header, or of NDJSON (one object per line); ``.gz`` allowed.

    Empty CSV cells are missing fields; an NDJSON line that is not valid JSON becomes ``None``,
    which the schema rejects as "record must be a mapping".
    """
    return read_table(read_once(path), text_columns)[0]


def read_table(file: ReadFile, text_columns: tuple[str, ...] = ()
               ) -> tuple[list[Any], tuple[str, ...] | None]:
    """(records, the CSV header's column names, or None for NDJSON) of a file read once.

    A path ending in ``.gz`` is gunzipped. CSV cells of ``text_columns`` (a user id column)
    stay text: ``007`` is not ``7.0``. Bytes that cannot be decoded are :class:`InputError`
    (exit status 1) naming the file.
    """
    try:
        raw = gzip.decompress(file.data) if file.path.suffix == ".gz" else file.data
        return _parse_table(raw.decode("utf-8-sig"), text_columns)
    except (OSError, UnicodeDecodeError, EOFError, zlib.error, csv.Error) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InputError(f"{file.path} cannot be read as CSV or NDJSON ({type(e).__name__}: "
                         f"{reason}); give a UTF-8 CSV file with a header, or NDJSON "
                         "(.gz allowed)") from None


def _parse_table(text: str, text_columns: tuple[str, ...]
                 ) -> tuple[list[Any], tuple[str, ...] | None]:
    if text.lstrip()[:1] in ("{", "["):
        records: list[Any] = []
        for line in text.splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    records.append(None)
        return records, None
    rows = csv.DictReader(text.splitlines())
    header = tuple(name for name in (rows.fieldnames or ()) if name)
    return [{k: v if k in text_columns else _csv_value(v) for k, v in row.items()
             if k is not None and v not in (None, "")} for row in rows], header


def load_source(
    input_path: Path | None, schema_path: Path | None, dataset: str | None, points: int,
    seed: int, limit: int | None, *, time_column: str | None = None,
    units: SynthesisSettings | None = None,
) -> Source:
    """The input named by the options: a file, a data set, or the generated stream.

    ``time_column`` (``dpsynth run --time-column``) is never a coordinate of the header form.
    ``units``: the run's settings; under the privacy unit "user" every source carries users
    (a file's declared user column, Gowalla's users, or generated ones).
    """
    if input_path is not None and dataset is not None:
        raise click.UsageError("give either --input or --dataset, not both")
    selection = {"limit": limit}
    if schema_path is not None and input_path is None:
        raise click.UsageError("--schema maps the columns of an --input file; add --input FILE")
    if time_column is not None and input_path is None:
        raise click.UsageError("--time-column reads the time of each record of an --input file; "
                               "add --input FILE")
    by_user = units is not None and units.privacy_unit == "user"
    if input_path is not None:
        source = _file_source(input_path, schema_path, time_column, units)
        source.identity.update(selection)
    elif dataset == "gowalla":
        path = datasets.gowalla_path()
        if not path.is_file():
            raise InputError(
                f"dataset gowalla: {path} is missing; set {datasets.DATA_DIR_ENV} to the folder "
                "holding gowalla_nyc/ (../shared/data), or pass --input FILE"
            )
        xy, users = datasets.load_gowalla_users(path)
        source = Source(f"Gowalla NYC check-ins ({path}), time order, lon/lat scaled to [0,1]",
                        ("x (lon)", "y (lat)"), points=xy, users=users if by_user else None,
                        identity={"dataset": "gowalla", "file": file_digest(path), **selection})
    else:
        source = Source(
            f"generated stream: {points:,} points, 4 drifting Gaussian blobs (seed {seed})",
            ("x", "y"), points=datasets.drifting_blobs(points, seed),
            users=datasets.demo_users(points, seed) if by_user else None,
            identity={"generated": "drifting_blobs", "points": points, "seed": seed,
                      **selection})
        if by_user:
            source.label += f", {max(points // 20, 1):,} generated users (heavy-tailed)"
    if source.records is None and units is not None and units.user_column:
        raise click.UsageError("--user-column names a column of an --input file; the data "
                               "sets and the generated stream bring their own users")
    if limit is not None:
        if source.records is not None:
            source.records = source.records[:limit]
        else:
            assert source.points is not None  # a source holds records or points
            source.points = source.points[:limit]
            source.users = None if source.users is None else source.users[:limit]
        source.label += f", first {limit:,} records"
    return source


def _file_source(path: Path, schema_path: Path | None, time_column: str | None = None,
                 units: SynthesisSettings | None = None) -> Source:
    """The records of ``path`` under a declared schema, or under the CSV header's columns.

    A schema is never inferred from values (docs/design.md D10): without
    ``--schema`` every column named in the CSV header is a coordinate in [0,1], and a row whose
    value does not parse as a number there is rejected (dead-lettered), never a column dropped.
    NDJSON has no header, so it needs ``--schema``.

    Every failure here is decided by the options and the file's header alone (exit status 1),
    never by how many records there are or what they hold: under add/remove the exit status
    is part of what a run shows (docs/privacy.md P11). The schema and the input are each read
    once (:func:`read_once`); the source's identity and ``setting_files`` are the digests of
    the bytes parsed (P13).
    """
    schema_file = None if schema_path is None else read_once(schema_path)
    declared = None if schema_file is None else Schema.from_dict(read_json(schema_file,
                                                                           "schema"))
    column = (units.user_column or (declared.user_column if declared else None)
              if units is not None and units.privacy_unit == "user" else None)
    data = read_once(path)
    identity = {"file": data.digest}
    files = {} if schema_file is None else {"schema_path": schema_file.digest}
    records, header = read_table(data, (column,) if column else ())
    if declared is not None:
        schema = _user_schema(declared, units)
        if header is not None:  # NDJSON names no columns up front: a missing field rejects
            needed = [*schema.names, *(c for c in (schema.user_column, time_column) if c)]
            missing = [name for name in needed if name not in header]
            if missing:
                raise InputError(
                    f"{path}: the CSV header ({', '.join(header) or 'empty'}) has no column "
                    f"{', '.join(map(repr, missing))} named by --schema {schema_path}"
                    f"{' or --time-column' if time_column in missing else ''}; fix the "
                    "schema's column names or the header")
        label = f"{path}, schema {schema_path}"
        return Source(label, schema.names, identity, schema=schema, records=records,
                      units=schema, setting_files=files)
    if header is None:
        raise InputError(
            f"{path} is NDJSON, which names no columns up front; pass --schema FILE to declare "
            "the columns and their bounds (examples/points.schema.json shows the format)"
        )
    for option, name in (("--time-column", time_column), ("--user-column", column)):
        if name is not None and name not in header:
            raise InputError(f"{option} {name!r} is not a column of {path} (its header: "
                             f"{', '.join(header)})")
        header = tuple(h for h in header if h != name)
    if not header:
        raise InputError(f"{path} has no CSV header naming a coordinate; write one, or pass "
                         "--schema FILE")
    schema = _user_schema(Schema(tuple(Column(name, 0.0, 1.0) for name in header)), units)
    label = f"{path}, header columns {', '.join(header)} as coordinates in [0, 1] (no --schema)"
    warning = (f"WARNING: no --schema: the header's columns {', '.join(header)} are taken as "
               "coordinates in [0, 1]; values outside are clipped to 0 or 1 and a value that "
               "is not a number rejects its row. Declare each column's bounds with --schema "
               "FILE (examples/points.schema.json shows the format).")
    return Source(label, header, identity, schema=schema, records=records, warnings=[warning],
                  setting_files=files)


def file_digest(path: Path) -> str:
    """SHA-256 of a data set file's bytes (P13), read by its loader; a file named on the
    command line is read once with :func:`read_once` instead (a pipe cannot be read twice)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise InputError(f"{path} cannot be read ({e.strerror})") from None
    return digest.hexdigest()


def _user_schema(schema: Schema, units: SynthesisSettings | None) -> Schema:
    """The schema with the run's user id column (privacy unit "user"), checked."""
    if units is None:
        return schema
    try:
        schema = units.user_schema(schema, label=option_name)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    if units.privacy_unit == "user" and schema.user_column is None:
        raise click.UsageError("--privacy-unit user: name the column holding each record's "
                               "user id with --user-column C, or as \"user_column\" in the "
                               "schema")
    return schema


def source_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The input options shared by ``run`` and ``eval``."""
    options = [
        click.option("--input", "input_path",
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="CSV with a header, or NDJSON of objects (.gz allowed)."),
        click.option("--schema", "schema_path",
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="Schema JSON mapping named columns to [0,1]^d (schemas/). Without "
                          "it, every column of the CSV header is a coordinate in [0,1] (never "
                          "inferred from values); NDJSON needs it."),
        click.option("--dataset", type=click.Choice(["gowalla"]),
                     help="A data set of ../shared/data instead of --input (time order)."),
        click.option("--points", type=click.IntRange(min=1), default=RUN_POINTS,
                     show_default=True, help="Size of the generated stream (the default input)."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the generated stream (not of the privacy noise: keyed)."),
        click.option("--limit", type=click.IntRange(min=1),
                     help="Use only the first N records of the input."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn
