"""``dlwatch probe bench | autotune | seed-check`` (also ``python -m probes bench …``).

Exit codes (:class:`watchdog.exits.Exit`): 0 done; 2 a bad flag or ``--dataset`` (one line
naming it; nothing is measured); 1 a run failed; 130 interrupted. Parsing a command's flags
(``--help`` included) imports neither torch nor rich: the measuring modules are imported when a
command runs.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from watchdog.argtypes import one_line
from watchdog.exits import Exit, of_signal

from ..cli import (
    MAX_WORKERS,
    Parser,
    choice_list,
    float_range,
    int_list,
    int_range,
    minutes,
    output_file,
    plot_file,
    say_estimate,
)
from .child import MIN_ROUNDS
from .grid import FALSE_WORDS, START_METHODS, TRUE_WORDS, GridError, LoaderConfig, expand, parse_shape
from .stop import catch_signals, hold_signals

if TYPE_CHECKING:
    from .measure import Result

# The machine-load thresholds (probes/bench/load.py, which imports nothing heavy).
BUSY_SHARE, WITHHOLD_SHARE = 0.10, 0.50

DEFAULT_SAMPLES = 2048
IMPROVEMENT = 1.05  # autotune: a step must beat the best so far by 5%
AUTO = "auto"
# Typo guards: the largest values the flags accept (README "Benchmarks", and each flag's --help).
MAX_BATCH_SIZE = 65536
MAX_PREFETCH_FACTOR = 128
MAX_SAMPLES = 10**8
MAX_REPEATS = 100
MAX_WARMUP_BATCHES = 10_000
MAX_MS = 60_000.0
MAX_SAMPLE_BYTES = 2**30


def auto_workers(usable: float) -> List[int]:
    """The ``num_workers`` that ``auto`` stands for on a machine with ``usable`` CPUs: 0, the
    powers of two up to twice the usable CPUs (more workers than CPUs pay off only when samples
    wait on storage, ``--io-ms``), and the usable CPU count itself (rounded down)."""
    top = max(1, int(usable))
    out = {0, top}
    w = 1
    while w <= 2 * top:
        out.add(w)
        w *= 2
    return sorted(out)


def resolve_workers(text: str, usable: Optional[float] = None) -> str:
    """``--num-workers`` with each ``auto`` replaced by :func:`auto_workers` (``usable``
    defaults to this process's usable CPUs: affinity and cgroup quota); other items are left
    for :func:`~probes.bench.grid.expand` to check."""
    parts = [p.strip() for p in text.split(",")]
    if AUTO not in parts:
        return text
    if usable is None:
        from .machine import usable_cpus

        usable = usable_cpus()
    out: List[str] = []
    for p in parts:
        out.extend(str(w) for w in auto_workers(usable)) if p == AUTO else out.append(p)
    return ",".join(out)


def sample_shape(text: str) -> str:
    """An argparse ``type`` for ``--sample-shape``: a comma list of sizes of at most 1 GiB of
    float32 in all. Returns the text (:func:`~probes.bench.grid.parse_shape` reads it).

    Raises:
        argparse.ArgumentTypeError: not a comma list of whole numbers above 0, or too large.
    """
    try:
        shape = parse_shape(text)
    except GridError:
        raise argparse.ArgumentTypeError("must be a comma list of whole numbers above 0, e.g. 3,224,224") from None
    if math.prod(shape) * 4 > MAX_SAMPLE_BYTES:
        raise argparse.ArgumentTypeError("over 1 GiB per sample")
    return text


def dataset_spec(text: str) -> str:
    """An argparse ``type`` for ``--dataset``: ``module:callable`` in form (importing it and
    checking the Dataset come when the command runs). Returns the text.

    Raises:
        argparse.ArgumentTypeError: not of that form.
    """
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise argparse.ArgumentTypeError("expected module:callable, e.g. mypkg.data:make_dataset")
    return text


_BOOLS = choice_list(TRUE_WORDS + FALSE_WORDS, ignore_case=True)


def _grid_flags(p: argparse.ArgumentParser, workers_default: str) -> None:
    g = p.add_argument_group("grid (each a comma list)")
    g.add_argument(
        "--num-workers",
        type=int_list(0, MAX_WORKERS, [AUTO]),
        default=workers_default,
        help=f"DataLoader num_workers values, each from 0 to {MAX_WORKERS}; `auto` is 0, the powers of two up to "
        "twice the usable CPUs, and the usable CPU count",
    )
    g.add_argument("--pin-memory", type=_BOOLS, default="false,true", help="pin_memory values (true/false)")
    g.add_argument(
        "--batch-size",
        type=int_list(1, MAX_BATCH_SIZE),
        default="128",
        help=f"batch_size values, each from 1 to {MAX_BATCH_SIZE}",
    )
    g.add_argument(
        "--prefetch-factor",
        type=int_list(1, MAX_PREFETCH_FACTOR),
        default="2",
        help=f"prefetch_factor values (with workers), each from 1 to {MAX_PREFETCH_FACTOR}",
    )
    g.add_argument("--persistent-workers", type=_BOOLS, default="false", help="persistent_workers values")
    g.add_argument(
        "--multiprocessing-context",
        type=choice_list(START_METHODS),
        default="fork",
        help="start methods: " + ", ".join(START_METHODS),
    )


def _samples_flag(p, help_text: str) -> None:
    p.add_argument(
        "--samples", type=int_range(2, MAX_SAMPLES), default=None, help=f"{help_text}; from 2 to {MAX_SAMPLES}"
    )


def _dataset_flags(p: argparse.ArgumentParser) -> None:
    d = p.add_argument_group("dataset")
    _samples_flag(d, f"synthetic dataset length (default: {DEFAULT_SAMPLES}, or more when the grid needs it)")
    d.add_argument(
        "--sample-shape", type=sample_shape, default="3,224,224", help="synthetic sample shape (at most 1 GiB)"
    )
    d.add_argument(
        "--cpu-ms",
        type=float_range(0.0, MAX_MS),
        default=0.0,
        help=f"real CPU work per sample, milliseconds from 0 to {MAX_MS:g} (calibrated on this machine)",
    )
    d.add_argument(
        "--io-ms",
        type=float_range(0.0, MAX_MS),
        default=0.0,
        help=f"per-sample wait, milliseconds from 0 to {MAX_MS:g} (simulated remote storage)",
    )
    d.add_argument(
        "--dataset",
        type=dataset_spec,
        metavar="MODULE:CALLABLE",
        help="your own map-style Dataset instead of the synthetic one",
    )


def _measure_flags(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("measurement and output")
    m.add_argument(
        "--repeats",
        type=int_range(1, MAX_REPEATS),
        default=3,
        help=f"fresh subprocess runs per configuration, from 1 to {MAX_REPEATS}",
    )
    m.add_argument(
        "--warmup-batches",
        type=int_range(0, MAX_WARMUP_BATCHES),
        default=2,
        help=f"batches not timed, from 0 to {MAX_WARMUP_BATCHES} (at least num_workers are skipped anyway)",
    )
    m.add_argument("--json", type=output_file, metavar="PATH", help="every measurement and the machine, as JSON")
    m.add_argument("--csv", type=output_file, metavar="PATH", help="one row per run, as CSV")
    m.add_argument(
        "--busy-limit",
        type=float_range(0.0, 1.0),
        default=WITHHOLD_SHARE,
        metavar="SHARE",
        help="withhold the verdict when other processes used at least this share of the machine's CPUs during the "
        f"runs (from /proc/stat; 0 to 1, 1: never; default {WITHHOLD_SHARE:g}); above {BUSY_SHARE:g} each run's "
        "interval is widened by what they may have taken",
    )
    m.add_argument(
        "--plot",
        type=plot_file,
        metavar="PATH.png",
        help="throughput against num_workers, one line per pin_memory",
    )


def min_samples(batch_size: int, num_workers: int, warmup_batches: int) -> int:
    """Samples needed for a steady window of MIN_ROUNDS whole rounds of ``num_workers``
    batches after the warm-up (see probes/bench/child.py)."""
    rounds = max(num_workers, 1)
    return batch_size * (max(warmup_batches, rounds) + 1 + MIN_ROUNDS * rounds)


def _check_length(args, configs: Sequence[LoaderConfig], length: Optional[int]) -> int:
    """The dataset length to use: ``--samples`` or 2048 raised to what the grid needs.

    Raises:
        GridError: an explicit ``--samples`` (or the user's dataset) is too short.
    """
    needed = max(min_samples(c.batch_size, c.num_workers, args.warmup_batches) for c in configs)
    if needed > MAX_SAMPLES:
        raise GridError(
            f"this grid needs {needed} samples for a steady state, over {MAX_SAMPLES}: use fewer workers, smaller "
            "batches or fewer --warmup-batches"
        )
    if length is not None:
        if length < needed:
            what = f"--dataset {args.dataset} has {length} items" if args.dataset else f"--samples {length} is"
            raise GridError(
                f"{what} too few for a steady state with this grid: need at least {needed} (or fewer workers / "
                "smaller batches)"
            )
        return length
    return max(DEFAULT_SAMPLES, needed)


def _dataset(args, configs: Sequence[LoaderConfig], randn: bool = False) -> tuple:
    """``(dataset spec for the child, sample bytes, cpu_bound, description)``.

    Raises:
        GridError, DatasetError: naming the flag.
    """
    from .datasets import SyntheticDataset, calibrate_steps_per_ms, load_user_dataset, sample_bytes

    if args.dataset:
        ds = load_user_dataset(args.dataset)
        n = len(ds)  # type: ignore[arg-type]  # load_user_dataset checked that it has one
        _check_length(args, configs, n)
        return {"spec": args.dataset}, sample_bytes(ds), False, f"dataset {args.dataset} ({n} items)"
    shape = parse_shape(args.sample_shape)
    samples = _check_length(args, configs, args.samples)
    rate = calibrate_steps_per_ms() if args.cpu_ms else 0.0
    steps = int(args.cpu_ms * rate)
    syn = {"samples": samples, "shape": list(shape), "cpu_steps": steps, "io_s": args.io_ms / 1000, "randn": randn}
    nbytes = sample_bytes(SyntheticDataset(2, shape))
    text = f"synthetic: {samples} samples of {tuple(shape)} float32" + (" (torch.randn)" if randn else "")
    if args.cpu_ms:
        text += (
            f"; calibration: {rate:.0f} LCG steps per CPU-millisecond, so --cpu-ms {args.cpu_ms:g} = {steps} steps "
            "per sample"
        )
    if args.io_ms:
        text += f"; {args.io_ms:g} ms simulated storage wait per sample"
    return {"synthetic": syn}, nbytes, args.cpu_ms > 0, text


def _run_all(configs: Sequence[LoaderConfig], dataset: dict, args, title: str) -> List[Result]:
    """Measure ``configs`` side by side (:func:`~.measure.measure_side_by_side`), with a
    progress bar on a terminal, else one line per run on stderr (a log file is not left silent)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .measure import Result, measure_side_by_side

    results = [Result(c) for c in configs]
    if SO_FAR.results is None:
        SO_FAR.results = results
    total = len(configs) * args.repeats
    console = Console(stderr=True)
    done = [0]

    def line(r: Result) -> None:
        done[0] += 1
        print(
            f"{title}: run {done[0]}/{total}: {r.config.label()}: {r.runs[-1].throughput:.0f} samples/s",
            file=sys.stderr,
            flush=True,
        )

    if not console.is_terminal:
        return measure_side_by_side(results, dataset, args.repeats, args.warmup_batches, on_run=line)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} runs"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(f"{title} (each round runs every configuration once)", total=total)
        measure_side_by_side(results, dataset, args.repeats, args.warmup_batches, on_run=lambda r: bar.advance(task))
    return results


def _report(
    results: List[Result],
    args,
    dataset_text: str,
    nbytes,
    cpu_bound: bool,
    extra: Optional[dict] = None,
    partial: str = "",
) -> dict:
    """Print the table, the best and the knee, the ceiling, how busy the machine was and the
    warnings; write ``--json``, ``--csv`` and ``--plot``. ``partial`` (why the measurement
    stopped early) withholds the recommendation and marks the files partial. Returns the JSON
    document."""
    import dataclasses

    from . import load as load_mod
    from . import machine as machine_mod
    from . import output
    from .measure import annotate

    results = [r for r in results if r.runs]
    for r in results:
        annotate(r)
    mach = machine_mod.describe()
    batch_bytes = nbytes * max(int(x) for x in args.batch_size.split(",")) if nbytes else None
    ceilings = output.ceiling(results, mach["usable_cpus"], cpu_bound)
    warns = output.warnings_for(results, mach, batch_bytes)
    print(f"dataset: {dataset_text}")
    print(output.table(results, ceilings))
    print(
        "(* marks the fastest median; `best:` below is the recommendation: of those it cannot tell apart from the "
        "fastest, the cheapest whose median is within 5% of the fastest's)"
    )
    top, bend = output.best(results), output.knee(results)
    choice = output.choose(results, _cuda(results), getattr(args, "busy_limit", load_mod.WITHHOLD_SHARE))
    if partial:
        choice = dataclasses.replace(choice, withheld=f"the measurement stopped early ({partial})")
    print(load_mod.busy_line(output.machine_load(results), "the runs"))
    print(choice.text())
    if choice.ignored:
        print(
            f"not ranked: {', '.join(r.config.label() for r in choice.ignored)}: pin_memory has no effect without "
            "CUDA here, so its gap to the others is noise"
        )
    print(
        f"knee: {bend.config.label()} ({bend.throughput / top.throughput:.0%} of the fastest with "
        f"{bend.config.num_workers} workers)"
    )
    line = output.ceiling_text(results, mach["usable_cpus"], ceilings)
    if line:
        print(line)
    single = [r.cpu_per_sample_s for r in results if r.config.num_workers == 0 and r.cpu_per_sample_s]
    if cpu_bound and single and args.cpu_ms:
        per_sample_ms = 1000 * single[0]
        print(
            f"calibration check: with num_workers=0 a sample cost {per_sample_ms:.1f} ms of CPU in all, for --cpu-ms "
            f"{args.cpu_ms:g} of synthetic work plus loading ({per_sample_ms / args.cpu_ms:.0%} of the target)"
        )
    warns.extend(output.noise_warnings(results, ceilings))
    for w in warns:
        print(f"warning: {w}")
    settings = {k: v for k, v in vars(args).items() if k not in ("func",)}
    doc = output.document(results, mach, settings, ceilings, warns, choice, partial)
    doc["dataset"] = dataset_text
    doc.update(extra or {})
    if args.json:
        output.write_json(args.json, doc)
    if args.csv:
        output.write_csv(args.csv, doc)
    if args.plot and not partial:
        output.plot(args.plot, results)
    return doc


class SoFar:
    """What a command has measured so far, for :func:`write_partial` when it is stopped early:
    its results (or a callable returning them), and what :func:`_report` needs besides."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget what was measured (a new command starts)."""
        self.results: Any = None
        self.args: Any = None
        self.report_args: tuple = ()
        self.extra: dict = {}

    def set(self, results, args, dataset_text: str, nbytes, cpu_bound: bool) -> None:
        self.results, self.args, self.report_args = results, args, (dataset_text, nbytes, cpu_bound)

    def measured(self) -> List[Result]:
        found = self.results() if callable(self.results) else self.results
        return [r for r in found or () if r.runs]


SO_FAR = SoFar()


def write_partial(reason: str) -> bool:
    """Print and write (``--json``, ``--csv``, marked ``partial``) what :data:`SO_FAR` holds,
    the recommendation withheld; returns whether there was anything. Raises nothing but
    ``OSError`` from writing the files."""
    results = SO_FAR.measured()
    if not results or SO_FAR.args is None:
        return False
    runs = sum(len(r.runs) for r in results)
    print(f"partial: {reason}: the {runs} run(s) finished so far follow", flush=True)
    text, nbytes, cpu_bound = SO_FAR.report_args
    _report(results, SO_FAR.args, text, nbytes, cpu_bound, SO_FAR.extra, partial=reason)
    return True


def _grid(args) -> List[LoaderConfig]:
    """The grid the flags describe, ``auto`` in ``--num-workers`` resolved (and recorded in
    ``args`` as the numbers it stood for).

    Raises:
        GridError: naming the flag whose list is malformed.
    """
    args.num_workers = resolve_workers(args.num_workers)
    return expand(
        args.num_workers,
        args.pin_memory,
        args.batch_size,
        args.prefetch_factor,
        args.persistent_workers,
        args.multiprocessing_context,
    )


def _cuda(results: Sequence[Result]) -> bool:
    """Whether the runs saw CUDA (each child records ``torch.cuda.is_available()``)."""
    return any(run.cuda for r in results for run in r.runs)


# Rounds of more repeats for configurations that cannot be told apart from the best.
EXTRA_ROUNDS = 2
MAX_EXTRA_ROUNDS = 10


def separate_ties(results: List[Result], dataset: dict, args, title: str, cuda: bool, measure=None) -> int:
    """Measure again, side by side, the configurations of ``results`` that cannot be told apart
    from the fastest (:func:`~.output.choose`), ``args.repeats`` runs each a round, until they
    separate or ``args.extra_rounds`` rounds have run; their new runs join their results.
    ``measure`` is :func:`~.measure.measure_side_by_side` unless given (same signature).
    Returns the rounds run (0: the fastest stood apart, or no round was allowed)."""
    from . import output
    from .measure import measure_side_by_side

    measure = measure or measure_side_by_side
    rounds = 0
    while rounds < args.extra_rounds:
        tied = output.choose(results, cuda).tied
        if len(tied) < 2:
            break
        labels = ", ".join(r.config.label() for r in tied)
        print(f"{title}: measuring {labels} again, side by side (their ranges overlap)", file=sys.stderr, flush=True)
        measure(list(tied), dataset, args.repeats, args.warmup_batches)
        rounds += 1
    return rounds


def cmd_bench(args) -> int:
    """Measure every configuration of the grid, then again those that cannot be told apart
    from the fastest (:func:`separate_ties`), and report them."""
    configs = _grid(args)
    dataset, nbytes, cpu_bound, text = _dataset(args, configs)
    SO_FAR.set(None, args, text, nbytes, cpu_bound)
    results = _run_all(configs, dataset, args, "bench")
    rounds = separate_ties(results, dataset, args, "bench", _cuda(results))
    _report(results, args, text, nbytes, cpu_bound, {"extra_rounds_run": rounds})
    return Exit.OK


def cmd_autotune(args) -> int:
    """Hill-climb over the candidate num_workers (doubling from the smallest while throughput
    improves by 5%, then the neighbours of the best), then pin_memory at the best only when
    CUDA is there; the other axes take their first value. A configuration is measured side by
    side with the one it is compared to (:func:`~.measure.measure_side_by_side`: their runs
    alternate, and the other's new runs join its own), so a drift of the machine is not taken
    for a difference."""
    import torch

    from . import output
    from .measure import Result, measure_side_by_side

    started = time.monotonic()
    grid = _grid(args)
    candidates = sorted({c.num_workers for c in grid})
    base = grid[0]
    dataset, nbytes, cpu_bound, text = _dataset(args, grid)
    measured: dict = {}
    SO_FAR.set(lambda: list(measured.values()), args, text, nbytes, cpu_bound)

    def at(w: int, pin: bool, against: Optional[Result] = None) -> Result:
        key = (w, pin)
        if key not in measured:
            c = LoaderConfig(
                w, pin, base.batch_size, base.prefetch_factor, base.persistent_workers, base.multiprocessing_context
            )
            side = f", side by side with {against.config.label()}" if against is not None else ""
            print(f"autotune: measuring {c.label()}{side}", file=sys.stderr, flush=True)
            measured[key] = Result(c)
            both = [measured[key]] + ([against] if against is not None else [])
            measure_side_by_side(both, dataset, args.repeats, args.warmup_batches)
        return measured[key]

    pin0 = False if False in {c.pin_memory for c in grid} else True
    best_i = i = 0
    at(candidates[0], pin0)
    while True:  # doubling: the first candidate at least twice the current one
        target = 2 * max(candidates[i], 1)
        j = next((k for k in range(i + 1, len(candidates)) if candidates[k] >= target), None)
        if j is None:
            break
        best = at(candidates[best_i], pin0)
        if at(candidates[j], pin0, best).throughput <= IMPROVEMENT * best.throughput:
            break
        best_i = i = j
    for j in (best_i - 1, best_i + 1):  # refine: the best's neighbours among the candidates
        best = at(candidates[best_i], pin0)
        if 0 <= j < len(candidates) and at(candidates[j], pin0, best).throughput > best.throughput:
            best_i = j
    pins = {c.pin_memory for c in grid}
    if len(pins) > 1 and torch.cuda.is_available():
        at(candidates[best_i], not pin0, at(candidates[best_i], pin0))
    rounds = separate_ties(list(measured.values()), dataset, args, "autotune", torch.cuda.is_available())
    results = list(measured.values())
    elapsed = time.monotonic() - started
    full = len(grid)
    per_config = elapsed / len(results)
    choice = output.choose(results, torch.cuda.is_available(), args.busy_limit)
    top = choice.pick
    print(
        f"autotune: ran {len(results)} of {full} grid configurations in {elapsed:.0f} s (the full grid: about "
        f"{full * per_config:.0f} s)"
    )
    if len(pins) > 1 and not torch.cuda.is_available():
        print("autotune: pin_memory not measured: no effect without CUDA (torch starts no pin-memory thread)")
    if choice.withheld:
        print(f"autotune: no recommendation: {choice.withheld}")
    elif len(choice.tied) > 1:
        print(
            f"autotune: {len(choice.tied)} configurations cannot be told apart after {rounds} more rounds; "
            f"the cheapest within 5% of the fastest's median: use {top.config.label()}"
        )
    else:
        print(f"autotune: use {top.config.label()}")
    _report(
        results,
        args,
        text,
        nbytes,
        cpu_bound,
        {
            "autotune": {
                "configurations_run": len(results),
                "grid_size": full,
                "seconds": elapsed,
                "choice": None if choice.withheld else top.config.as_dict(),
            },
            "extra_rounds_run": rounds,
        },
    )
    return Exit.OK


def ratio_interval(a: Result, b: Result) -> Tuple[float, float, float]:
    """``(ratio, low, high)`` of the throughput ratio ``a / b``. With the same number of runs
    (two or more) the runs are paired by round (:func:`~.measure.measure_side_by_side` runs
    each configuration once a round, so a round's two runs saw the same machine) and judged by
    the one statistic of every paired A/B, ``dlwatch verify``'s among them
    (:func:`watchdog.commands.throughput_ab.paired_interval`: the geometric mean of the rounds'
    ratios and a Student t-interval on their logs, widened for other processes' mean share of
    the CPUs over both configurations' runs). Otherwise the ratio of the medians: with one run
    each, ±5 % (:data:`~.output.SINGLE_RUN_MARGIN`), each run possibly slowed by other
    processes by up to :attr:`~.measure.Run.widening` (the low end assumes ``b``'s run was, the
    high end ``a``'s); with unequal counts, the medians' intervals divided (``a``'s low by
    ``b``'s high, and the reverse)."""
    from watchdog.commands.throughput_ab import paired_interval

    from .output import SINGLE_RUN_MARGIN

    mid = a.throughput / b.throughput if b.throughput else math.inf
    if len(a.runs) == len(b.runs) == 1:
        ra, rb = a.runs[0], b.runs[0]
        r = ra.throughput / rb.throughput
        return mid, r / SINGLE_RUN_MARGIN / rb.widening, r * SINGLE_RUN_MARGIN * ra.widening
    if len(a.runs) == len(b.runs):
        shares = [r.others_cpus / r.host_cpus for r in (*a.runs, *b.runs) if r.others_cpus is not None and r.host_cpus]
        iv = paired_interval(
            [y.throughput for y in b.runs],
            [x.throughput for x in a.runs],
            sum(shares) / len(shares) if shares else None,
        )
        if iv is not None:
            return iv.ratio, iv.low, iv.high
    (alo, ahi), (blo, bhi) = a.median_interval, b.median_interval
    return mid, alo / bhi, ahi / blo


def verdict(interval: Tuple[float, float, float]) -> Optional[bool]:
    """A claim that ``a`` is faster than ``b`` from their :func:`ratio_interval`: ``True``
    (held) when the whole interval lies above 1, ``False`` (did not hold) when it lies below,
    ``None`` (cannot tell) when it holds 1."""
    _, lo, hi = interval
    return True if lo > 1 else (False if hi < 1 else None)


def beats(a: Result, b: Result) -> bool:
    """``a`` is faster than ``b``: the interval of their ratio lies above 1 (:func:`verdict`)."""
    return verdict(ratio_interval(a, b)) is True


def _ratio(a: Result, b: Result) -> str:
    mid, lo, hi = ratio_interval(a, b)
    return (
        f"{mid:.2f}, interval {lo:.2f}–{hi:.2f} ({a.throughput:.0f} vs {b.throughput:.0f} samples/s, runs "
        f"{a.throughput_span[0]:.0f}–{a.throughput_span[1]:.0f} vs "
        f"{b.throughput_span[0]:.0f}–{b.throughput_span[1]:.0f})"
    )


def _seed_check_configs(batch_size: int, cuda: bool = True) -> List[LoaderConfig]:
    """seed-check's configurations: no workers, W workers, and (only where CUDA is, since
    without it pin_memory=True runs the same code) W workers with pin_memory."""
    w = max(2, (os.cpu_count() or 2) // 2)
    return [
        LoaderConfig(0, False, batch_size, 2, False, "fork"),
        LoaderConfig(w, False, batch_size, 2, False, "fork"),
    ] + ([LoaderConfig(w, True, batch_size, 2, False, "fork")] if cuda else [])


VERDICT_WORDS = {True: "HELD", False: "DID NOT HOLD", None: "CANNOT TELL"}


def claim_verdicts(
    zero: Result, more: Result, pinned: Optional[Result], cuda: bool, torch_version: str, withheld: str = ""
) -> List[dict]:
    """seed-check's three claims, each ``{"claim", "held", "verdict", "evidence"}``: ``held``
    is ``True`` only when the ratio's interval lies above 1 (:func:`verdict`), ``False`` when
    it lies below, ``None`` when it holds 1, when ``withheld`` (the machine was too busy: the
    verdict says why) or when the claim was not measured (one that cannot hold without CUDA, or
    cannot be tested with it)."""
    w = more.config.num_workers

    def measured(claim: str, v: Optional[bool], evidence: str) -> dict:
        word = f"WITHHELD ({withheld})" if withheld else VERDICT_WORDS[v]
        if not withheld and v is None:
            word += " (the ratio's interval holds 1)"
        return {"claim": claim, "held": None if withheld else v, "verdict": word, "evidence": evidence}

    def not_measured(claim: str, why: str) -> dict:
        return {"claim": claim, "held": None, "verdict": f"not measured: {why}", "evidence": ""}

    more_v = verdict(ratio_interval(more, zero))
    claims = [measured("more workers is faster", more_v, f"W={w}/W=0 throughput ratio {_ratio(more, zero)}")]
    if cuda and pinned is not None:
        a, b = verdict(ratio_interval(pinned, more)), verdict(ratio_interval(pinned, zero))
        both = True if a is True and b is True else (False if False in (a, b) else None)
        claims.append(measured("pin_memory=True is fastest", both, f"pin on/off ratio {_ratio(pinned, more)}"))
        claims.append(not_measured("pin_memory matters without CUDA", "this machine has CUDA"))
    else:
        why = (
            f"no CUDA device (torch {torch_version} starts no pin-memory thread without one, so pin_memory=True "
            "runs the same code as False)"
        )
        claims.append(not_measured("pin_memory=True is fastest", why))
        claims.append(not_measured("pin_memory matters without CUDA", why))
    return claims


def cmd_seed_check(args) -> int:
    """The classic experiment, claim by claim, with measured ratios and their intervals; the
    pinned configuration only where CUDA is (:func:`claim_verdicts`)."""
    import torch

    from . import load as load_mod
    from .output import machine_load

    cuda = torch.cuda.is_available()
    configs = _seed_check_configs(args.batch_size_one, cuda)
    args.batch_size = str(args.batch_size_one)
    dataset, nbytes, cpu_bound, text = _dataset(args, configs, randn=True)
    SO_FAR.set(None, args, text, nbytes, cpu_bound)
    results = _run_all(configs, dataset, args, "seed-check")
    zero, more = results[0], results[1]
    pinned = results[2] if len(results) > 2 else None
    busy = machine_load(results)
    limit = getattr(args, "busy_limit", load_mod.WITHHOLD_SHARE)
    withheld = (
        f"the machine was busy: other processes used {busy.others_cpus:.2f} of {busy.host_cpus} CPUs"
        if busy is not None and limit < 1 and busy.share >= limit
        else ""
    )
    claims = claim_verdicts(zero, more, pinned, cuda, torch.__version__, withheld)
    if args.repeats < 2:
        print("seed-check: one repeat per configuration: each ratio's interval is only ±5% (use --repeats 3)")
    _report(results, args, text, nbytes, cpu_bound, {"claims": claims})
    for c in claims:
        print(f"claim: {c['claim']!r}: {c['verdict']}" + (f" — {c['evidence']}" if c["evidence"] else ""))
    return Exit.OK


_DESCRIPTIONS = {
    "bench": "Measure DataLoader throughput over a grid of configurations, each in a fresh subprocess.",
    "autotune": "Find the best num_workers (and whether pin_memory helps) without running the full grid.",
    "seed-check": "Check three folk claims about num_workers and pin_memory on this machine, with measured ratios.",
}


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one of ``bench``, ``autotune``, ``seed-check``."""
    p = Parser(prog=f"dlwatch probe {command}", description=_DESCRIPTIONS[command])
    if command == "seed-check":
        _samples_flag(p, f"number of torch.randn(3,224,224) samples (default: {DEFAULT_SAMPLES}, or more when needed)")
        p.add_argument(
            "--batch-size",
            dest="batch_size_one",
            type=int_range(1, MAX_BATCH_SIZE),
            default=128,
            help=f"batch_size, from 1 to {MAX_BATCH_SIZE}",
        )
        p.set_defaults(sample_shape="3,224,224", cpu_ms=0.0, io_ms=0.0, dataset=None)
    else:
        _grid_flags(p, "0,1,2,4" if command == "bench" else "auto")
        _dataset_flags(p)
    _measure_flags(p)
    if command != "seed-check":
        p.add_argument(
            "--extra-rounds",
            type=int_range(0, MAX_EXTRA_ROUNDS),
            default=EXTRA_ROUNDS,
            help=f"while the fastest cannot be told apart from others, measure those again side by side, up to this "
            f"many rounds of --repeats runs each (0 to {MAX_EXTRA_ROUNDS}; default {EXTRA_ROUNDS})",
        )
    return p


COMMANDS = {"bench": cmd_bench, "autotune": cmd_autotune, "seed-check": cmd_seed_check}


def _check_grid(args, command: str) -> None:
    """The checks that take several flags together (each flag alone was checked while parsing):
    the grid, and an explicit ``--samples`` long enough for it; before torch is imported.

    Raises:
        GridError: naming the flags.
    """
    configs = _seed_check_configs(args.batch_size_one) if command == "seed-check" else _grid(args)
    # With --dataset, the grid's own needs only: the Dataset's length is checked once it is loaded.
    _check_length(args, configs, None if args.dataset else args.samples)


# Seconds one run takes on a 2-core VM beside the samples' own work (a fresh Python importing torch,
# its workers started, 2048 samples of 3x224x224 moved): 2026-12-05, `bench --num-workers 2
# --pin-memory false --repeats 1 --extra-rounds 0` took 10.2 s in all.
RUN_S = 8.0


def run_s(config: LoaderConfig, samples: int, cpu_ms: float, io_ms: float, cpus: int = 2) -> float:
    """About how many seconds one run of ``config`` takes on a machine of ``cpus`` CPUs:
    :data:`RUN_S`, and ``samples`` samples of ``cpu_ms`` (shared by at most ``cpus`` processes)
    and ``io_ms`` (waited by every worker at once) each."""
    workers = max(1, config.num_workers)
    return RUN_S + samples * (cpu_ms / min(workers, cpus) + io_ms / workers) / 1000


def estimate_s(command: str, args, configs: Sequence[LoaderConfig]) -> Tuple[float, float, str]:
    """``(seconds, more seconds at most, how)``: about how long ``command`` takes with ``args`` on
    a 2-core machine, and how much longer its extra rounds (``--extra-rounds``, or autotune's
    side-by-side runs) may make it; ``how`` says what was added up."""
    samples = _check_length(args, configs, None if args.dataset else args.samples)
    cpu_ms = 0.0 if command == "seed-check" else args.cpu_ms
    io_ms = 0.0 if command == "seed-check" else args.io_ms
    per = [run_s(c, samples, cpu_ms, io_ms) for c in configs]
    runs = len(configs) * args.repeats
    seconds = args.repeats * sum(per)
    if command == "autotune":  # each candidate measured beside the one it is compared to: twice the runs at most
        workers = {c.num_workers: p for c, p in zip(configs, per) if not c.pin_memory}
        seconds = args.repeats * sum(workers.values())
        return seconds, seconds, f"{len(workers)} num_workers candidate(s) x {args.repeats} run(s)"
    more = 0.0 if command == "seed-check" else getattr(args, "extra_rounds", 0) * args.repeats * max(per) * 2
    return seconds, more, f"{runs} run(s) of about {max(per):.0f} s"


def main(command: str, argv: List[str]) -> int:
    """Run ``command`` (``bench``, ``autotune`` or ``seed-check``) with ``argv``; one-line
    errors and :attr:`Exit.USAGE` for bad input (a flag or ``--dataset``, named), before
    anything is measured; :attr:`Exit.FAILED` when a run fails; 130 when interrupted (SIGINT
    or SIGTERM: the run in progress is killed with its workers)."""
    parser = build_parser(command)
    args = parser.parse_args(argv)
    try:
        _check_grid(args, command)
    except GridError as e:
        parser.error(str(e))
    configs = _seed_check_configs(args.batch_size_one) if command == "seed-check" else _grid(args)
    seconds, more, how = estimate_s(command, args, configs)
    if more:
        how += f"; up to {minutes(more)} more when the fastest must be measured again"
    say_estimate(command, seconds, how)
    catch_signals()
    try:
        from .datasets import DatasetError
        from .measure import RunError
    except ImportError as e:
        print(
            f"dlwatch: error: probe {command} needs the [probes] extra (torch, matplotlib, rich): {e}", file=sys.stderr
        )
        return Exit.USAGE
    SO_FAR.reset()
    try:
        return COMMANDS[command](args)
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        hold_signals()  # a second signal must not cut the partial files short
        print(f"dlwatch: interrupted ({signal.Signals(signum).name}); the run in progress was stopped", file=sys.stderr)
        _partial(f"stopped by {signal.Signals(signum).name}")
        return of_signal(signum)
    except (GridError, DatasetError) as e:
        print(f"dlwatch: error: {one_line(str(e), 1000)}", file=sys.stderr)
        return Exit.USAGE
    except RunError as e:
        print(f"dlwatch: error: {one_line(str(e), 1000)}", file=sys.stderr)
        _partial(f"a run failed: {one_line(str(e), 300)}")
        return Exit.FAILED


def _partial(reason: str) -> None:
    """:func:`write_partial`, saying on stderr what was written or why nothing was."""
    try:
        if write_partial(reason):
            print(
                "dlwatch: what was measured before it stopped is above (and in --json/--csv, marked partial)",
                file=sys.stderr,
            )
        else:
            print("dlwatch: no run had finished: nothing to write", file=sys.stderr)
    except OSError as e:
        print(f"dlwatch: error: cannot write the partial results: {e}", file=sys.stderr)


def bench_main(argv: List[str]) -> int:
    """``dlwatch probe bench ARGS…``: see :func:`main`."""
    return main("bench", argv)


def autotune_main(argv: List[str]) -> int:
    """``dlwatch probe autotune ARGS…``: see :func:`main`."""
    return main("autotune", argv)


def seed_check_main(argv: List[str]) -> int:
    """``dlwatch probe seed-check ARGS…``: see :func:`main`."""
    return main("seed-check", argv)
