"""dpsynth's benchmarks, one command: ``python -m benchmarks COMMAND`` (``make bench``).

Not installed with the package. Every speed is a median over repeats and a ratio to a baseline
timed in the same run; data sets come from ``DPSYNTH_DATA_DIR`` (../shared/data). Commands:

``core noise|level|all|accuracy|rate|throughput|modes|offline|offline-cost|peer``
    the sampler, one level tick, the online synthesizer's accuracy and speed, the schedules,
    the offline mechanisms and the add/remove comparison with PHDStream (docs/benchmarks.md:
    "Noise sampler and counter tick", "Paper mode", "Offline mechanisms";
    docs/lab/benchmarks-history.md);
``kafka``
    the Kafka worker from produce to release ("Kafka worker");
``recovery``
    kill -9 → the first record the restarted worker processes, over many kills ("Kafka
    worker");
``topics``
    ``dpsynth topics import`` / ``export`` of a recording of 10^6 records ("Topic recordings");
``concentrated``
    the concentrated panel (issue 31): the default against offline PMM and PHDStream on
    streams with most records in a tiny corner (docs/lab/concentrated-streams.md);
``state``
    restoring a partition without its disk (state topic vs replay, by history length) and the
    state bytes written per record ("State that travels");
``release-size``
    bytes of a release by occupied leaves, and of the history a run makes (docs/operator.md
    "Sizing the history");
``drift``
    accuracy under drift: every mechanism against offline PMM on stationary and drifting
    streams ("Accuracy of the default", "Accuracy by mechanism", "Accuracy under drift");
``tabular``, ``tabular-report`` and ``tabular-speed``
    paper 003's Adult tables and the per-step time before/after issue 17 ("Tabular streams");
``mutation``
    the mutation check of the privacy core (docs/privacy.md P14): every overspending mutant
    of every shipped mechanism must fail a test aimed at its draw;
``draws``
    the table of every keyed draw × path × mechanism with its scale tests and its mutant
    (docs/privacy.md P14 "Every draw, every path");
``points``
    the materialised points (points_format arrow) against the compact release: bytes,
    records and seconds per release ("Materialised points");
``user``
    the privacy unit "user": accuracy on Gowalla against PMM, cost of bounding, state size,
    10^7 distinct users ("Privacy unit user").
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from benchmarks import accuracy as bench_accuracy
from benchmarks import modes as bench_modes
from benchmarks import noise as benchmarks
from benchmarks.kafka import bench_kafka
from benchmarks.points import bench_points
from benchmarks.recovery import bench_recovery
from benchmarks.release_size import bench_release_size
from benchmarks.state import bench_state
from benchmarks.topics import bench_topics
from benchmarks.users import bench_users
from dpsynth.tabular.metrics import METRICS
from dpsynth.tabular.synthesizer import FITS


@click.group()
def main() -> None:
    """dpsynth benchmarks (docs/benchmarks.md gives each section's command)."""


main.add_command(bench_kafka, name="kafka")
main.add_command(bench_recovery, name="recovery")
main.add_command(bench_topics, name="topics")
main.add_command(bench_release_size, name="release-size")
main.add_command(bench_state, name="state")
main.add_command(bench_users, name="user")
main.add_command(bench_points, name="points")


@main.command(name="core")
@click.argument(
    "which", default="all",
    type=click.Choice(["noise", "level", "all", "accuracy", "rate", "throughput", "modes",
                       "offline", "offline-cost", "peer"]),
)
@click.option(
    "--repeats", type=click.IntRange(min=1), default=5, show_default=True,
    help="Repeats per measurement (noise, level, throughput); medians are reported.",
)
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True,
              help="accuracy: seeds (noise keys and uniform streams) per data set and size.")
@click.option("--peak-records", type=click.IntRange(min=0), default=10_000_000,
              show_default=True,
              help="throughput: peak memory of a run to this t, in a fresh process (0: skip).")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path),
              help="accuracy, rate: save PNG plots in this directory (e.g. docs/img).")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the raw results (every repeat or seed) to this JSON file.",
)
@click.option("--schedule", type=click.Choice(["paper", "guided", "adaptive"]),
              default="paper", show_default=True, help="throughput: the mechanism measured.")
def bench(which: str, repeats: int, seeds: int, peak_records: int, plots_dir: Path | None,
          json_path: Path | None, schedule: str) -> None:
    """Benchmarks: noise sampler (noise), one LevelCounters tick (level), noise + level (all),
    online vs PMM vs floor (accuracy), W1 rate in t (rate), ingest and memory (throughput).

    Speeds are medians over repeats and ratios to baselines timed in the same run.
    """
    console = Console()
    machine = benchmarks.machine_info()
    results: dict[str, Any] = {}
    if which in ("noise", "all"):
        with console.status(f"noise: {repeats} repeats (OpenDP takes seconds per repeat)…"):
            results["noise"] = benchmarks.run_noise_bench(repeats)
        benchmarks.print_noise_report(results["noise"], console)
    if which in ("level", "all"):
        with console.status(f"level: {repeats} repeats of 2^20 cells…"):
            results["level"] = benchmarks.run_level_bench(repeats)
        benchmarks.print_level_report(results["level"], console)
    if which == "accuracy":
        results["accuracy"] = _bench_accuracy(console, seeds, plots_dir)
    if which == "rate":
        with console.status("rate: d = 1, 2, 3 and t = 10^3 … 10^6…"):
            rows = bench_accuracy.rate_table()
        bench_accuracy.print_rate_report(rows, console)
        results["rate"] = {"rows": rows}
        if plots_dir is not None:
            console.print(f"plot: {bench_accuracy.plot_rate(rows, plots_dir)}")
    if which == "throughput":
        results["throughput"] = _bench_throughput(console, repeats, peak_records, schedule)
    if which == "modes":
        results["modes"] = _bench_modes(console, seeds, plots_dir)
    if which == "peer":
        from benchmarks import peer as bench_peer  # issue 8

        with console.status(f"peer: uniform + gowalla to t = 10^5, {seeds} seeds…"):
            rows = bench_peer.peer_rows(seeds=seeds)
        summary = bench_peer.summarise_peer(rows)
        bench_peer.print_peer(summary, console)
        results["peer"] = {"rows": rows, "summary": summary}
    if which == "offline":
        from benchmarks import offline as bench_offline  # issue 6

        results["offline"] = bench_offline.run(console, seeds)
    if which == "offline-cost":
        from benchmarks import offline as bench_offline

        results["offline-cost"] = bench_offline.run_cost(console)
    for result in results.values():
        result.setdefault("machine", machine)
    console.print(
        f"[dim]{machine['date']}; nproc {machine['nproc']}, load {machine['loadavg_1m']}; "
        f"python {machine['python']}, numpy {machine['numpy']}, numba {machine['numba']}, "
        f"opendp {machine['opendp']}[/]"
    )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=2) + "\n")
        console.print(f"raw results written to {json_path}")


def _bench_accuracy(console: Console, seeds: int, plots_dir: Path | None) -> dict[str, Any]:
    if not bench_accuracy.GOWALLA.is_file():
        console.print(f"[yellow]{bench_accuracy.GOWALLA} is missing: uniform data only[/]")
    with console.status(f"accuracy: uniform + gowalla, t = 2·10^4 and 10^5, {seeds} seeds…"):
        rows = bench_accuracy.accuracy_table(seeds=seeds)
    bench_accuracy.print_accuracy_report(rows, console)
    if plots_dir is not None:
        console.print(f"plot: {bench_accuracy.plot_accuracy(rows, plots_dir)}")
    return {"rows": rows, "summary": bench_accuracy.summarise_accuracy(rows)}


def _bench_throughput(
    console: Console, repeats: int, peak_records: int, schedule: str
) -> dict[str, Any]:
    with console.status(f"throughput ({schedule}): {repeats} runs of 10^6 records…"):
        result = bench_accuracy.throughput(repeats=repeats, schedule=schedule)
    if peak_records:
        with console.status(f"peak memory: one run to t = {peak_records:,} in a new process…"):
            result["peak"] = bench_accuracy.peak_memory(peak_records, schedule=schedule)
    bench_accuracy.print_throughput_report(result, console)
    return result


def _bench_modes(console: Console, seeds: int, plots_dir: Path | None) -> dict[str, Any]:
    """The default and paper vs PMM vs PMM-rep vs floor (d = 2; d = 1, 3 on uniform)."""
    with console.status(f"modes: d = 2, t = 4000 / 2·10^4 / 10^5, {seeds} seeds…"):
        rows = bench_modes.mode_rows(bench_modes.default_datasets(), (4000, 20_000, 100_000),
                                     seeds, dims=(2,))
    with console.status("modes: d = 1 and 3 on uniform data, t = 10^4 and 10^5…"):
        # d = 1 and 3 are a side table: min(seeds, 3) seeds keep the run under half an hour
        rows += bench_modes.mode_rows(bench_modes.default_datasets(include_gowalla=False),
                                      (10_000, 100_000), min(seeds, 3), dims=(1, 3))
    summary = bench_modes.summarise(rows)
    bench_modes.print_summary(summary, console)
    if plots_dir is not None:
        console.print(f"plot: {bench_modes.plot_summary(summary, plots_dir)}")
    return {"rows": rows, "summary": summary}


@main.command(name="tabular")
@click.option("--datasets", default="randomized-50,randomized-200,ordered-50,ordered-200",
              show_default=True, help="Streams: ORDER-BATCH, comma separated.")
@click.option("--epsilons", default="0.5,1,2,4", show_default=True)
@click.option("--methods", default="baseline,simple,block", show_default=True,
              help="baseline, simple, block, alg3 (the proposed method as printed: EM "
                   "selection and Alg 3's m and r, the defaults before issue 17).")
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds.")
@click.option("--k", "k", default="auto", show_default=True,
              help="Workloads per step: an integer, or auto (docs/tabular.md T3).")
@click.option("--max-steps", type=int, default=None, help="Truncate streams (smoke runs).")
@click.option("--estimator", type=click.Choice(["sample", "alg3"]), default="sample",
              show_default=True, help="Measurement of the proposed method (docs/tabular.md T6).")
@click.option("--selection", type=click.Choice(["cyclic", "em"]), default="cyclic",
              show_default=True, help="Selection of the proposed method (docs/tabular.md T18).")
@click.option("--fit", type=click.Choice(FITS), default="mw", show_default=True,
              help="Model fit (pgm needs dpsynth[pgm]); use a --tag per fit.")
@click.option("--neighbours", type=click.Choice(["add_remove", "replace"]),
              default="add_remove", show_default=True,
              help="add_remove: noisy sizes (ε_n = --size-share·ε); replace: public counts, "
                   "sensitivities doubled (docs/tabular.md T17).")
@click.option("--size-share", type=float, default=0.1, show_default=True,
              help="add_remove: share of ε for the noisy size counter.")
@click.option("--tag", default="run", show_default=True, help="Name of the results CSV.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("dpsynth-bench-tabular"), show_default=True)
def tabular_bench(datasets: str, epsilons: str, methods: str, seeds: str, k: str,
                  max_steps: int | None, estimator: str, selection: str, fit: str,
                  neighbours: str,
                  size_share: float, tag: str, out: Path) -> None:
    """Paper 003 Tables 1–3 on Adult: our numbers next to the paper's (last 10 steps)."""
    from benchmarks.tabular import (
        ADULT_DIR,
        RESULT_COLUMNS,
        auto_k,
        read_results,
        run_one,
        summary_markdown,
    )
    from dpsynth.datasets import load_adult, make_stream

    if not (ADULT_DIR / "adult.csv").exists():
        raise click.UsageError(f"{ADULT_DIR} is absent: the benchmark needs the Adult data")
    console = Console()
    domain, codes, csv_order = load_adult(ADULT_DIR)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"results-{tag}.csv"
    fresh = not path.exists()
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(RESULT_COLUMNS))
        if fresh:
            writer.writeheader()
        for spec in datasets.split(","):
            kind, batch = spec.split("-")
            for seed in (int(s) for s in seeds.split(",")):
                stream = make_stream(codes, csv_order, domain, kind, seed)
                for eps in (float(e) for e in epsilons.split(",")):
                    k_eps = auto_k(eps) if k == "auto" else int(k)
                    for method in methods.split(","):
                        res = run_one(domain, stream, int(batch), eps, method, seed, k_eps,
                                      max_steps=max_steps, estimator=estimator,
                                      selection=selection, fit=fit,
                                      neighbours=neighbours, size_share=size_share)
                        row = {"dataset": f"Adult-{kind}-bs-{batch}", "epsilon": eps,
                               "method": method, "seed": seed, "k": k_eps, **res}
                        writer.writerow(row)
                        f.flush()
                        console.print(
                            f"{row['dataset']} ε={eps:g} {method} seed={seed}: "
                            + " ".join(f"{m}={res[m]:.4f}" for m in METRICS)
                            + f" ({res['sec_per_step'] * 1000:.0f} ms/step, "
                            f"{res['peak_rss_mb']:.0f} MB peak)")
    table = summary_markdown(read_results(out))
    (out / "summary.md").write_text(table)
    console.print(table)


@main.command(name="tabular-speed")
@click.option("--steps", type=int, default=200, show_default=True)
@click.option("--repeats", type=int, default=3, show_default=True)
def tabular_speed(steps: int, repeats: int) -> None:
    """Per-step time before and after issue 17 (same process, alternating; medians, ratio)."""
    from benchmarks.tabular import speed_rows
    from dpsynth.datasets import load_adult, make_stream

    domain, codes, csv_order = load_adult()
    streams = {"randomized": make_stream(codes, csv_order, domain, "randomized", 0)}
    for row in speed_rows(domain, streams, steps=steps, repeats=repeats):
        click.echo(f"{row['dataset']} ε={row['epsilon']:g} {row['method']}: before "
                   f"{row['ms_before']:.1f} ms/step (k={row['k_before']}), after "
                   f"{row['ms_after']:.1f} ms/step (k={row['k_after']}), "
                   f"ratio {row['ratio']:.2f}")


@main.command(name="tabular-report")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("dpsynth-bench-tabular"), show_default=True)
def bench_report(out: Path) -> None:
    """Merge every results-*.csv in --out into the side-by-side table."""
    from benchmarks.tabular import read_results, summary_markdown

    table = summary_markdown(read_results(out))
    (out / "summary.md").write_text(table)
    click.echo(table)



def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in text.split(","))


@main.command(name="drift")
@click.option("--streams", default=",".join(("uniform", "moving_blob", "rotating_ring",
                                             "regime_switch", "gowalla")), show_default=True)
@click.option("--d", "ds", default="1,2,3", show_default=True)
@click.option("--t", "ts", default="4000,20000,100000", show_default=True)
@click.option("--epsilons", default="1,4", show_default=True)
@click.option("--mechanisms", default="guided,adaptive,paper", show_default=True,
              help="auto is guided below a per-record ε of 10³, adaptive from it "
                   "(docs/benchmarks.md, Accuracy of the default).")
@click.option("--notions", default="replace,add_remove", show_default=True)
@click.option("--seeds", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def drift_bench(streams: str, ds: str, ts: str, epsilons: str, mechanisms: str, notions: str,
                seeds: int, workers: int, json_path: Path | None) -> None:
    """Accuracy under drift: every mechanism against offline PMM (docs/benchmarks.md)."""
    from benchmarks.drift import panel_cases, run_panel

    cases = panel_cases(tuple(streams.split(",")), tuple(int(v) for v in ds.split(",")),
                        tuple(int(v) for v in ts.split(",")), tuple(mechanisms.split(",")),
                        _floats(epsilons), tuple(notions.split(",")), seeds)
    run_panel(cases, json_path, workers)


@main.command(name="concentrated")
@click.option("--streams", default="held-out", show_default=True,
              help="Stream names, or tuning, held-out or all (benchmarks.concentrated_streams).")
@click.option("--methods", default="auto,pmm,phdstream", show_default=True,
              help="dpsynth mechanisms (auto, guided, …), pmm and phdstream.")
@click.option("--epsilons", default="0.1,1,10", show_default=True)
@click.option("--notions", default="replace,add_remove", show_default=True)
@click.option("--keys", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--t", "ts", default="4000,6000,8000,10000,14000,20000", show_default=True)
@click.option("--exact/--no-exact", default=True, show_default=True,
              help="Exact ℓ∞ W1 (POT) at t = 4000 (≈ 3 s a release).")
@click.option("--ours", default="auto", show_default=True, help="The method the ratios are of.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False,
                                                          path_type=Path),
              help="Summarise saved rows instead of running (several runs: repeat the option).",
              multiple=True)
def concentrated_bench(streams: str, methods: str, epsilons: str, notions: str, keys: int,
                       ts: str, exact: bool, ours: str, workers: int, json_path: Path | None,
                       from_json: tuple[Path, ...]) -> None:
    """The concentrated panel: default vs offline PMM vs PHDStream (issue 31)."""
    from benchmarks import concentrated as bench

    if from_json:
        rows = [r for path in from_json for r in bench.load(path)]
    else:
        names = {"tuning": tuple(bench.TUNING), "held-out": tuple(bench.HELD_OUT),
                 "all": tuple(bench.PANEL)}.get(streams, tuple(streams.split(",")))
        jobs = bench.panel_jobs(names, tuple(methods.split(",")), _floats(epsilons),
                                tuple(notions.split(",")), keys,
                                tuple(int(v) for v in ts.split(",")), exact)
        console = Console(stderr=True)
        rows = bench.run_jobs(jobs, workers, lambda i, n: console.print(f"{i}/{n}", end="\r"))
        if json_path is not None:
            bench.save(rows, json_path)
    print(bench.markdown(bench.summarise(rows, ours), ours))
    if any("exact" in r for r in rows):
        print()
        print(bench.markdown(bench.summarise(rows, ours, "exact"), ours, "exact"))
    print()
    print("| stream | t | ε | notion | method | bias x (t) | bias y (t) | same sign x/y |")
    print("|---|---:|---:|---|---|---:|---:|---|")
    for b in bench.bias_table(rows):
        print(f"| {b['stream']} | {b['t']:,} | {b['epsilon']:g} | {b['neighbours']} | "
              f"{b['method']} | {b['mean'][0]:+.5f} ({b['tstat'][0]:+.1f}) | "
              f"{b['mean'][1]:+.5f} ({b['tstat'][1]:+.1f}) | "
              f"{'/'.join('yes' if s else 'no' for s in b['same_sign'])} |")


@main.command(name="mutation")
@click.argument("only", nargs=-1)
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the table of mutants caught to this file.")
def mutation(only: tuple[str, ...], markdown_path: Path | None) -> None:
    """Mutation check of the privacy core: each noise scale × 0.25 and each budget share × 4
    of every shipped mechanism, one at a time, must fail a test aimed at it (ONLY: substrings
    of mutant names). Exit status 1 if a mutant survives, 2 if the check itself is broken (a
    seam moved, a mutant never exercised)."""
    import sys
    import time

    from benchmarks.mutation import MUTANTS, check_mutants, markdown

    chosen = tuple(m for m in MUTANTS if not only or any(o in m.name for o in only))
    if not chosen:
        raise click.UsageError(f"no mutant name contains any of {list(only)}")
    started = time.monotonic()
    outcomes = check_mutants(chosen)
    table = markdown(outcomes)
    print("\n" + table)
    print(f"\n{len(outcomes)} mutants, {sum(o.caught for o in outcomes)} caught, "
          f"{time.monotonic() - started:.0f} s")
    if markdown_path is not None:
        markdown_path.write_text(table + "\n")
    survived = [o.mutant.name for o in outcomes if not o.caught]
    if survived:
        print(f"SURVIVED: {survived}", file=sys.stderr)
        sys.exit(1)


@main.command(name="draws")
def draws() -> None:
    """The registry of keyed draws (benchmarks/draws.py) as the Markdown table of
    docs/privacy.md P14: each draw × path × mechanism, its scale tests (at which ε) and the
    mutant that overspends it."""
    from benchmarks.draws import markdown

    print(markdown())


if __name__ == "__main__":
    main()
