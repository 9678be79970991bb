"""No raw value and no key material in what the commands publish (issue 44), byte for byte.

``dpsynth run`` (privacy unit "user", ``--points-format arrow``), ``dpsynth offline`` and
``dpsynth tabular run`` read inputs holding recognisable values — the coordinates
0.1234567891234 and 0.8765432198765 of schema bounds [-2, 3] × [-1, 4] (so they map to other
values in [0,1]) and the user id "zq-sentinel-7781", a tenth of the records each, plus as many
records of other users at the same coordinates — under one fixed key. Every byte of every
release they write (releases/, points/, schema.json, the synthetic CSVs, ``*.meta.json``,
``*.release.bin``, ``release-metadata.json``, ``release-*.tabular``), their standard output
and every HTTP answer of ``dpsynth view --folder`` on the run's folder is searched for each
value in each encoding of :mod:`tests.support.rawscan` (float64 in both byte orders, msgpack,
the decimal texts, each raw and mapped to [0,1]; the id's UTF-8 and keyed hash; the key raw and
in hex, the user-id hash's subkey): none is found. Not scanned, by name, are exactly the
evaluation and operation artefacts docs/privacy.md ("What neither notion covers") says are
not releases: ``summary.json``, ``errors.csv``, the plots and the dead-letter file (and
standard error, the operator diagnostics). The scan is not vacuous: the outputs hold
releases and the bytes scanned are counted; the same scanner finds the values in the input
files, in pyarrow's encoding of them, and every needle planted in a real release file.

Deterministic (fixed key, fixed input): the outcome is the same on every run. A chance match
is ≤ 1e-9 (the longest-odds needle, 10 significant digits of a float as text, against the
few thousand numbers written).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.keybinding import STATE_DIR_ENV
from dpsynth.keys import KEY_ENV, KEY_FILE_ENV
from dpsynth.schema import Schema
from tests.support.rawscan import (
    SENTINEL_SCHEMA,
    SENTINEL_USER,
    SENTINEL_X_TEXT,
    SENTINEL_Y_TEXT,
    Scan,
    assert_planted_found,
    sentinel_needles,
    sentinel_rows,
    view_answers,
)
from tests.support.tabular import SMALL_DOMAIN, write_domain

#: A fixed test key (never a constant key in production). Never printed: hits name it only.
KEY = hashlib.sha256(b"dpsynth issue 44: the raw-byte scan of the commands").digest()
#: docs/privacy.md "What neither notion covers": evaluation and operation artefacts, not
#: releases (they hold true counts or raw records) — the only files not scanned.
NOT_RELEASES = frozenset({"summary.json", "errors.csv", "true-vs-synthetic.png",
                          "w1-over-t.png", "errors.png", "dead-letter.ndjson"})
ROWS, EVERY = 300, 10


def _invoke(args: list[str], state: Path) -> bytes:
    """The command in-process (the real CLI), under the test key; its standard output."""
    result = CliRunner().invoke(main, args, env={KEY_ENV: KEY.hex(), KEY_FILE_ENV: None,
                                                 STATE_DIR_ENV: str(state)})
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def test_no_raw_value_or_key_byte_reaches_the_commands_releases_or_the_view(
        tmp_path: Path) -> None:
    schema = Schema.from_dict(SENTINEL_SCHEMA)
    needles = sentinel_needles(schema, {"x": SENTINEL_X_TEXT, "y": SENTINEL_Y_TEXT},
                               user=SENTINEL_USER, key=KEY)
    (tmp_path / "in").mkdir()
    schema_file = tmp_path / "in" / "schema.json"
    schema_file.write_text(json.dumps(SENTINEL_SCHEMA))
    data = tmp_path / "in" / "points.csv"
    data.write_text("uid,x,y\n" + "".join(
        f"{u},{x},{y}\n" for u, x, y in sentinel_rows(ROWS, EVERY, 44, schema)))
    table = tmp_path / "in" / "table.csv"
    table.write_text("colour,member,age4,score5,uid\n" + "".join(
        f"{['red', 'green', 'blue'][i % 3]},{['no', 'yes'][i % 2]},{i % 4},{i % 5},"
        f"{SENTINEL_USER if i % EVERY == 0 else f'u{i % 37}'}\n" for i in range(ROWS)))
    domain = write_domain(tmp_path / "in" / "domain.json", SMALL_DOMAIN)

    stdout = {
        "dpsynth run": _invoke(
            ["run", "--input", str(data), "--schema", str(schema_file), "--out",
             str(tmp_path / "run"), "--release-every", "100", "--max-depth", "12",
             "--privacy-unit", "user", "--max-contributions", "20", "--points-format",
             "arrow", "--w1-points", "200"], tmp_path / "state-run"),
        "dpsynth offline": _invoke(
            ["offline", "--input", str(data), "--schema", str(schema_file), "--max-depth",
             "12", "--out", str(tmp_path / "offline" / "synthetic.csv")],
            tmp_path / "state-offline"),
        "dpsynth tabular run": _invoke(
            ["tabular", "run", "--data", str(table), "--domain", str(domain), "--neighbours",
             "replace", "--release-every", "100", "--write-every", "1", "--out",
             str(tmp_path / "tabular")], tmp_path / "state-tabular"),
    }
    scan = Scan(needles)
    for command, out in stdout.items():
        scan.add(f"{command}: standard output", out)
    files = sorted(p for d in ("run", "offline", "tabular") for p in (tmp_path / d).rglob("*")
                   if p.is_file())
    skipped = {p.name for p in files if p.name in NOT_RELEASES}
    assert skipped == NOT_RELEASES  # every excluded artefact was written, and only those
    released = [p for p in files if p.name not in NOT_RELEASES]
    for path in released:
        scan.add_file(path, tmp_path)
    names = {str(p.relative_to(tmp_path)) for p in released}
    releases = sorted((tmp_path / "run" / "releases").iterdir())
    assert len(releases) >= 2, releases
    assert {f"run/releases/{releases[-1].name}", f"run/points/points-{len(releases):06d}.arrow",
            "run/schema.json", "offline/synthetic.csv", "offline/synthetic.csv.meta.json",
            "tabular/synthetic-last.csv", "tabular/release-metadata.json",
            "tabular/release-000003.tabular"} <= names, names

    answers = view_answers(["--folder", str(tmp_path / "run")], lambda state: any(
        p["sequence"] == len(releases) for p in state["partitions"]))
    for where, answer in answers.items():
        scan.add(f"dpsynth view --folder: {where}", answer)
    scan.assert_clean(min_bytes=20_000)

    # the scanner can fail: the raw inputs hold the values as written, pyarrow's encoding of
    # the values (the points files' library) holds their little-endian float64, and every
    # needle planted in a real release file is found where it was planted
    raw = Scan(needles)
    raw.add_file(data, tmp_path)
    raw.add_file(table, tmp_path)
    assert {"x (input units) as text '0.1234567891234'",
            "y (input units) as text '0.8765432198765'",
            "the user id as UTF-8"} <= raw.found()
    sink = io.BytesIO()
    arrow = pa.table({"x": [float(SENTINEL_X_TEXT)], "y": [float(SENTINEL_Y_TEXT)]})
    with pa.ipc.new_stream(sink, arrow.schema) as writer:
        writer.write_table(arrow)
    raw.add("pyarrow IPC of the raw values", sink.getvalue())
    assert {"x (input units) as float64 little-endian",
            "y (input units) as float64 little-endian"} <= raw.found()
    assert_planted_found(needles, releases[-1].read_bytes())


@pytest.mark.parametrize("hex_case", ["lower", "upper"])
def test_a_hit_names_the_output_and_offset_never_the_key(hex_case: str) -> None:
    """A failure report says where and which encoding; the key's bytes never appear in it."""
    schema = Schema.from_dict(SENTINEL_SCHEMA)
    scan = Scan(sentinel_needles(schema, {"x": SENTINEL_X_TEXT}, key=KEY))
    text = KEY.hex() if hex_case == "lower" else KEY.hex().upper()
    scan.add("a leaky output", b"prefix:" + text.encode())
    with pytest.raises(AssertionError) as failure:
        scan.assert_clean()
    report = str(failure.value)
    assert f"the noise key as {hex_case}case hex in a leaky output at byte 7" in report
    assert KEY.hex() not in report.lower() and repr(KEY) not in report
