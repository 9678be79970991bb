"""``dpsynth run``'s feeding: the source in batches (or one step per declared time bucket)
through the synthesizer, every release (and its points) written as it is made.

Layer: adapter. Split from :mod:`dpsynth.cli.run` (the command: options, key, announcement,
report); rejected records go to ``OUT/dead-letter.ndjson`` (index and reason, never the value).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dpsynth.bounding import split_user_records
from dpsynth.cli.common import Source
from dpsynth.cli.outputs import Diagnostics, prepare_out_dir
from dpsynth.cli.timesteps import TimeSteps
from dpsynth.contract import feed
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import Release, encode_release, write_release_file
from dpsynth.release.points_arrow import write_points_file
from dpsynth.schema import Schema

BATCH_RECORDS = 2_000  # records per call of OnlineSynthesizer.extend (one progress step)
#: What ``run`` writes under ``--out`` (a reused directory is emptied of these first).
RUN_OUTPUTS = ("releases/release-*.bin", "points/points-*.arrow", "schema.json",
               "dead-letter.ndjson", "summary.json", "true-vs-synthetic.png", "w1-over-t.png")


@dataclass
class RunLog:
    """What ``run`` fed and wrote: the valid points in order, release files, diagnostics."""

    true: np.ndarray
    files: list[tuple[int, int, Path]]  # (sequence, records fed, path) per release
    diagnostics: Diagnostics


@dataclass(frozen=True)
class Outputs:
    """Where ``run`` writes: OUT/releases/, and OUT/points/ with ``--points-format arrow``."""

    out: Path
    run_id: str
    schema: Schema  # the points' units and column names (OUT/schema.json)
    points: bool = False

    @property
    def releases(self) -> Path:
        return self.out / "releases"

    @property
    def points_dir(self) -> Path:
        return self.out / "points"

    def prepare(self) -> None:
        """Empty OUT of an earlier run's outputs (anything else: refused), create the folders,
        write OUT/schema.json."""
        prepare_out_dir(self.out, RUN_OUTPUTS)
        self.releases.mkdir(parents=True, exist_ok=True)
        if self.points:
            self.points_dir.mkdir(parents=True, exist_ok=True)
        (self.out / "schema.json").write_text(json.dumps(self.schema.to_dict(), indent=2) + "\n")


def _write_release(release: Release, outputs: Outputs) -> tuple[int, int, Path]:
    """Write one release (and its points); returns (sequence, records behind it, path).

    The records are ``release.t``: the count under replacement; a step feed (add/remove:
    a noisy size) counts its own instead.
    """
    sequence = int(release.metadata["sequence"])
    path = outputs.releases / f"release-{sequence:06d}.bin"
    write_release_file(path, encode_release(release, run_id=outputs.run_id, partition=0,
                                            sequence=sequence))
    if outputs.points:  # post-processing: the release's points in units (--points-format)
        write_points_file(outputs.points_dir / f"points-{sequence:06d}.arrow", release,
                          outputs.schema, run_id=outputs.run_id, partition=0)
    return sequence, int(release.t), path


def feed_records(synth: OnlineSynthesizer, source: Source, outputs: Outputs,
          console: Console) -> RunLog:
    """Feed ``source`` in batches with a progress bar; write releases and dead letters."""
    out = outputs.out
    parts: list[np.ndarray] = []
    files: list[tuple[int, int, Path]] = []
    diagnostics = Diagnostics(read=source.n, dead_letter=out / "dead-letter.ndjson")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[releases]} releases"), TimeElapsedColumn())
    with (open(out / "dead-letter.ndjson", "w", encoding="utf-8") as dead,
          Progress(*columns, console=console) as progress):
        task = progress.add_task("records", total=source.n, releases=0)
        sizes: list[int] = []

        def chunks() -> Iterator[tuple[np.ndarray, Any]]:
            for size, points, report, rejects, users in source.batches(BATCH_RECORDS):
                for index, reason in rejects:  # the index and the rule broken, never the value
                    line = json.dumps({"index": index, "reason": reason}, ensure_ascii=False)
                    dead.write(line + "\n")
                diagnostics.reject(reason for _, reason in rejects)
                diagnostics.clip(report)
                sizes.append(size)
                yield points, users

        for points, releases in feed(synth, chunks(), steps=False):
            parts.append(_counted(synth, points))
            files += [_write_release(r, outputs) for r in releases]
            progress.update(task, advance=sizes[-1], releases=len(files))
    true = np.concatenate(parts) if parts else np.zeros((0, source.d))
    return RunLog(true, files, diagnostics)


def _counted(synth: OnlineSynthesizer, points: np.ndarray) -> np.ndarray:
    """The points of the latest call that the synthesizer counted (within their users'
    bounds under the privacy unit "user"): what its releases describe."""
    return points if synth.users is None else points[synth.users.last_admitted]


def feed_steps(synth: OnlineSynthesizer, source: Source, steps: TimeSteps, outputs: Outputs,
                console: Console) -> RunLog:
    """One step per declared time bucket (public time): add its records, then step()."""
    out = outputs.out
    records = source.records or []
    bucket, rejects = steps.buckets(records)
    timed = np.flatnonzero(bucket >= 0)
    schema = source.schema
    assert schema is not None  # records come with their schema
    points, clips, bad, ids = (split_user_records(schema, [records[i] for i in timed])
                               if schema.user_column else
                               (*schema.split_valid([records[i] for i in timed]), None))
    rejects += [(int(timed[j]), why) for j, why in bad]
    keep = np.ones(timed.size, bool)
    keep[[j for j, _ in bad]] = False
    order = np.argsort(bucket[timed[keep]], kind="stable")  # time order, input order within
    points, bucket = points[order], bucket[timed[keep]][order]
    users = None if ids is None else [ids[i] for i in order]
    with open(out / "dead-letter.ndjson", "w", encoding="utf-8") as dead:
        for index, reason in sorted(rejects):  # the index and the rule broken, never the value
            dead.write(json.dumps({"index": index, "reason": reason}, ensure_ascii=False) + "\n")
    n_steps = steps.n_steps(bucket)
    bounds = np.searchsorted(bucket, np.arange(n_steps + 1))
    files, counted = [], []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("steps", total=n_steps)
        buckets = ((points[s], None if users is None else users[s]) for s in (
            slice(bounds[k], bounds[k + 1]) for k in range(n_steps)))
        # privacy: P11 (a step ends at the end of a declared time bucket)
        for step_points, (release,) in feed(synth, buckets, steps=True):
            counted.append(_counted(synth, step_points))
            sequence, _, path = _write_release(release, outputs)
            files.append((sequence, sum(len(c) for c in counted), path))
            progress.advance(task)
    true = np.concatenate(counted) if counted else np.zeros((0, source.d))
    diagnostics = Diagnostics(read=source.n, clips=clips,
                              dead_letter=out / "dead-letter.ndjson")
    diagnostics.reject(reason for _, reason in rejects)
    return RunLog(true, files, diagnostics)
