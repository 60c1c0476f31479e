"""``dlwatch probe bench | autotune | seed-check`` (also ``python -m probes bench …``).

Exit codes: 0 done; 2 a bad flag or ``--dataset`` (one line naming it); 1 a run failed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import List, Optional, Sequence

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from . import machine as machine_mod
from . import output
from .datasets import DatasetError, SyntheticDataset, calibrate_steps_per_ms, load_user_dataset, sample_bytes
from .grid import GridError, LoaderConfig, expand, parse_shape
from .measure import Result, RunError, measure

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
IMPROVEMENT = 1.05  # autotune: a step must beat the best so far by 5%


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        self.exit(EXIT_USAGE, f"dlwatch: error: {message} (see `{self.prog} --help`)\n")


def _common(p: argparse.ArgumentParser, workers_default: str) -> None:
    g = p.add_argument_group("grid (comma lists)")
    g.add_argument("--num-workers", default=workers_default)
    g.add_argument("--pin-memory", default="false,true")
    g.add_argument("--batch-size", default="128")
    g.add_argument("--prefetch-factor", default="2")
    g.add_argument("--persistent-workers", default="false")
    g.add_argument("--multiprocessing-context", default="fork")
    d = p.add_argument_group("dataset")
    d.add_argument("--samples", type=int, default=2048, help="synthetic dataset length (default: %(default)s)")
    d.add_argument("--sample-shape", default="3,224,224", help="synthetic sample shape (default: %(default)s)")
    d.add_argument("--cpu-ms", type=float, default=0.0, help="real CPU work per sample, milliseconds (calibrated)")
    d.add_argument("--io-ms", type=float, default=0.0, help="per-sample wait, milliseconds (simulated remote storage)")
    d.add_argument("--dataset", metavar="MODULE:CALLABLE", help="your own Dataset instead of the synthetic one")
    m = p.add_argument_group("measurement")
    m.add_argument("--repeats", type=int, default=3)
    m.add_argument("--warmup-batches", type=int, default=2)
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH")
    o.add_argument("--csv", metavar="PATH")
    o.add_argument("--plot", metavar="PATH.png")


def _dataset(args) -> tuple:
    """``(dataset spec for the child, sample bytes, cpu_bound, calibration text)``."""
    if args.samples < 2:
        raise GridError(f"--samples: must be at least 2, got {args.samples}")
    if args.cpu_ms < 0 or args.io_ms < 0:
        raise GridError("--cpu-ms/--io-ms: must not be negative")
    if args.dataset:
        ds = load_user_dataset(args.dataset)
        return {"spec": args.dataset}, sample_bytes(ds), False, f"dataset {args.dataset} ({len(ds)} items)"
    shape = parse_shape(args.sample_shape)
    rate = calibrate_steps_per_ms() if args.cpu_ms else 0.0
    steps = int(args.cpu_ms * rate)
    syn = {
        "samples": args.samples,
        "shape": list(shape),
        "cpu_steps": steps,
        "io_s": args.io_ms / 1000,
        "randn": getattr(args, "randn", False),
    }
    nbytes = sample_bytes(SyntheticDataset(2, shape))
    text = f"synthetic: {args.samples} samples of {tuple(shape)} float32"
    if args.cpu_ms:
        text += f"; calibration: {rate:.0f} LCG steps per CPU-millisecond, so --cpu-ms {args.cpu_ms:g} = {steps} steps per sample"
    if args.io_ms:
        text += f"; {args.io_ms:g} ms simulated storage wait per sample"
    return {"synthetic": syn}, nbytes, args.cpu_ms > 0, text


def _run_all(configs: Sequence[LoaderConfig], dataset: dict, args, title: str) -> List[Result]:
    results = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} runs"), TimeElapsedColumn(), transient=True
    ) as bar:
        task = bar.add_task(title, total=len(configs) * args.repeats)
        for c in configs:
            bar.update(task, description=f"{title}: {c.label()}")
            results.append(measure(c, dataset, args.repeats, args.warmup_batches, on_run=lambda: bar.advance(task)))
    return results


def _report(results: List[Result], args, dataset_text: str, nbytes, cpu_bound: bool, extra: Optional[dict] = None) -> dict:
    mach = machine_mod.describe()
    batch_bytes = nbytes * max(int(x) for x in args.batch_size.split(",")) if nbytes else None
    ceilings = output.ceiling(results, mach["usable_cpus"], cpu_bound)
    warns = output.warnings_for(results, mach, batch_bytes)
    print(f"dataset: {dataset_text}")
    print(output.table(results, ceilings))
    top, bend = output.best(results), output.knee(results)
    print(f"best: {top.config.label()} at {top.throughput:.0f} samples/s")
    print(f"knee: {bend.config.label()} ({bend.throughput / top.throughput:.0%} of the best with {bend.config.num_workers} workers)")
    if ceilings:
        print(f"ceiling (CPU-bound): one loader's throughput × min(num_workers, {mach['usable_cpus']:g} usable CPUs)")
    single = [r for r in results if r.config.num_workers == 0]
    if cpu_bound and single and args.cpu_ms:
        per_sample_ms = 1000 * statistics.median(run.cpu_s / run.samples for run in single[0].runs)
        print(
            f"calibration check: with num_workers=0 each sample cost {per_sample_ms:.1f} ms of CPU in all (--cpu-ms {args.cpu_ms:g} asked, plus loading)"
        )
    for w in warns:
        print(f"warning: {w}")
    settings = {k: v for k, v in vars(args).items() if k not in ("func",)}
    doc = output.document(results, mach, settings, ceilings, warns)
    doc["dataset"] = dataset_text
    doc.update(extra or {})
    if args.json:
        output.write_json(args.json, doc)
    if args.csv:
        output.write_csv(args.csv, doc)
    if args.plot:
        output.plot(args.plot, results)
    return doc


def cmd_bench(args) -> int:
    configs = expand(
        args.num_workers, args.pin_memory, args.batch_size, args.prefetch_factor, args.persistent_workers, args.multiprocessing_context
    )
    dataset, nbytes, cpu_bound, text = _dataset(args)
    results = _run_all(configs, dataset, args, "bench")
    _report(results, args, text, nbytes, cpu_bound)
    return EXIT_OK


def cmd_autotune(args) -> int:
    """Hill-climb over the candidate num_workers (doubling from the smallest while throughput
    improves by 5%, then the neighbours of the best), then pin_memory at the best only when
    CUDA is there; the other axes take their first value."""
    import torch

    started = time.monotonic()
    grid = expand(
        args.num_workers, args.pin_memory, args.batch_size, args.prefetch_factor, args.persistent_workers, args.multiprocessing_context
    )
    candidates = sorted({c.num_workers for c in grid})
    base = grid[0]
    dataset, nbytes, cpu_bound, text = _dataset(args)
    measured = {}

    def at(w: int, pin: bool) -> Result:
        key = (w, pin)
        if key not in measured:
            c = LoaderConfig(w, pin, base.batch_size, base.prefetch_factor, base.persistent_workers, base.multiprocessing_context)
            print(f"autotune: measuring {c.label()}", file=sys.stderr, flush=True)
            measured[key] = measure(c, dataset, args.repeats, args.warmup_batches)
        return measured[key]

    pin0 = False if False in {c.pin_memory for c in grid} else True
    best_i = i = 0
    at(candidates[0], pin0)
    while True:  # doubling: the first candidate at least twice the current one
        target = 2 * max(candidates[i], 1)
        j = next((k for k in range(i + 1, len(candidates)) if candidates[k] >= target), None)
        if j is None:
            break
        if at(candidates[j], pin0).throughput <= IMPROVEMENT * at(candidates[best_i], pin0).throughput:
            break
        best_i = i = j
    for j in (best_i - 1, best_i + 1):  # refine: the best's neighbours among the candidates
        if 0 <= j < len(candidates) and at(candidates[j], pin0).throughput > at(candidates[best_i], pin0).throughput:
            best_i = j
    pins = {c.pin_memory for c in grid}
    if len(pins) > 1 and torch.cuda.is_available():
        at(candidates[best_i], not pin0)
    results = list(measured.values())
    elapsed = time.monotonic() - started
    full = len(grid)
    per_config = elapsed / len(results)
    top = output.best(results)
    print(f"autotune: ran {len(results)} of {full} grid configurations in {elapsed:.0f} s (the full grid: about {full * per_config:.0f} s)")
    if len(pins) > 1 and not torch.cuda.is_available():
        print("autotune: pin_memory not measured: no effect without CUDA (torch starts no pin-memory thread)")
    print(f"autotune: use {top.config.label()}")
    _report(
        results,
        args,
        text,
        nbytes,
        cpu_bound,
        {"autotune": {"configurations_run": len(results), "grid_size": full, "seconds": elapsed, "choice": top.config.as_dict()}},
    )
    return EXIT_OK


def cmd_seed_check(args) -> int:
    """The classic three-configuration experiment, claim by claim, with measured ratios."""
    import os

    import torch

    w = max(2, (os.cpu_count() or 2) // 2)
    args.randn = True
    args.sample_shape = "3,224,224"
    dataset, nbytes, cpu_bound, text = _dataset(args)
    bs = int(args.batch_size.split(",")[0])
    configs = [
        LoaderConfig(0, False, bs, 2, False, "fork"),
        LoaderConfig(w, False, bs, 2, False, "fork"),
        LoaderConfig(w, True, bs, 2, False, "fork"),
    ]
    zero, more, pinned = _run_all(configs, dataset, args, "seed-check")
    cuda = torch.cuda.is_available()
    r_more = more.throughput / zero.throughput
    r_pin = pinned.throughput / more.throughput
    claims = [
        ("more workers is faster", r_more > IMPROVEMENT, f"W={w}/W=0 throughput ratio {r_more:.2f}"),
        (
            "pin_memory=True is fastest",
            pinned.throughput >= max(zero.throughput, more.throughput) * IMPROVEMENT,
            f"pin on/off ratio {r_pin:.2f}" + ("" if cuda else " (no CUDA here: pinning cannot help)"),
        ),
    ]
    if not cuda:
        claims.append(
            (
                "pin_memory matters without CUDA",
                abs(r_pin - 1) > IMPROVEMENT - 1,
                f"pin on/off ratio {r_pin:.2f}; torch {torch.__version__} starts no pin-memory thread without an accelerator",
            )
        )
    else:
        claims.append(("pin_memory matters without CUDA", None, "not testable: this machine has CUDA"))
    results = [zero, more, pinned]
    _report(results, args, text, nbytes, cpu_bound, {"claims": [{"claim": c, "held": h, "evidence": e} for c, h, e in claims]})
    for claim, held, evidence in claims:
        verdict = "not tested" if held is None else ("HELD" if held else "DID NOT HOLD")
        print(f"claim: {claim!r}: {verdict} — {evidence}")
    return EXIT_OK


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one of ``bench``, ``autotune``, ``seed-check``."""
    p = _Parser(prog=f"dlwatch probe {command}", description=__doc__.split("\n")[0])
    _common(p, "0,1,2,4" if command != "autotune" else "0,1,2,3,4,6,8,12,16")
    if command == "seed-check":
        p.set_defaults(samples=1280)
    return p


COMMANDS = {"bench": cmd_bench, "autotune": cmd_autotune, "seed-check": cmd_seed_check}


def main(command: str, argv: List[str]) -> int:
    """Run ``command`` with ``argv``; one-line errors and exit 2 for bad input."""
    args = build_parser(command).parse_args(argv)
    if args.repeats < 1 or args.warmup_batches < 0:
        print("dlwatch: error: --repeats must be ≥ 1 and --warmup-batches ≥ 0", file=sys.stderr)
        return EXIT_USAGE
    try:
        return COMMANDS[command](args)
    except (GridError, DatasetError) as e:
        print(f"dlwatch: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except RunError as e:
        print(f"dlwatch: error: {e}", file=sys.stderr)
        return EXIT_FAILED
