"""Benchmark output: the terminal table (sorted by throughput, best and knee marked), the
warnings, JSON and CSV with every measurement, and the throughput plot."""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tabulate import tabulate

from ..outfile import write_bytes, write_text
from . import load as load_mod
from .measure import Result

KNEE_FRACTION = 0.95


def best(results: Sequence[Result]) -> Result:
    """The configuration with the highest median throughput."""
    return max(results, key=lambda r: r.throughput)


# Two configurations measured once each are told apart only when one is this much faster.
SINGLE_RUN_MARGIN = 1.05


def apart(a: Result, b: Result) -> bool:
    """Whether ``a``'s and ``b``'s throughputs can be told apart: with two runs or more each,
    the intervals of their medians (:attr:`~.measure.Result.median_interval`: the slowest to
    the fastest run up to 5 runs, narrower with more, so that more rounds can separate them) do
    not overlap; with one run, the faster is more than 5 % faster."""
    if len(a.runs) >= 2 and len(b.runs) >= 2:
        (alo, ahi), (blo, bhi) = a.median_interval, b.median_interval
        return ahi < blo or bhi < alo
    lo, hi = sorted((a.throughput, b.throughput))
    return hi > SINGLE_RUN_MARGIN * lo


def _cost(r: Result) -> tuple:
    """What a configuration costs to run, cheapest first: fewer workers (processes, memory),
    no pinned memory, fewer prefetched batches, no persistent workers."""
    c = r.config
    return (c.num_workers, c.pin_memory, c.prefetch_factor, c.persistent_workers)


# A configuration cheaper than the fastest replaces it only when its median is at least this
# share of the fastest's: overlapping intervals alone (few runs, a busy machine) do not make the
# slowest of a tie the recommendation.
NEAR_FASTEST = 0.95


@dataclass(frozen=True)
class Choice:
    """The benchmark's recommendation: ``pick`` (:func:`choose`), ``tied`` (every configuration
    that cannot be told apart from the fastest, the fastest included, cheapest first) and
    ``ignored``, configurations left out of the ranking because their setting has no effect on
    this machine (``pin_memory`` without CUDA)."""

    pick: Result
    tied: Tuple[Result, ...]
    ignored: Tuple[Result, ...]
    withheld: str = ""

    def text(self) -> str:
        """One line for the terminal."""

        def runs(r: Result) -> str:
            lo, hi = r.median_interval
            return f"{r.config.label()} ({r.throughput:.0f} samples/s, median within {lo:.0f}–{hi:.0f})"

        if self.withheld:
            return (
                f"best: withheld: {self.withheld}; the fastest median was {best(self.tied).config.label()} at "
                f"{best(self.tied).throughput:.0f} samples/s (measure again on a quieter machine)"
            )
        if len(self.tied) < 2:
            return f"best: {self.pick.config.label()} at {self.pick.throughput:.0f} samples/s"
        why = (
            f"no cheaper one's median is within {1 - NEAR_FASTEST:.0%} of the fastest's, so the fastest is recommended"
            if self.pick is best(self.tied)
            else f"the cheapest whose median is within {1 - NEAR_FASTEST:.0%} of the fastest's is recommended"
        )
        return (
            f"best: cannot be told apart: {'; '.join(runs(r) for r in self.tied)}; these overlap; {why}: "
            f"{self.pick.config.label()} (more --repeats or --extra-rounds may separate them)"
        )


def machine_load(results: Sequence[Result]) -> Optional[load_mod.Load]:
    """Other processes' CPU use over every run of ``results`` (:func:`.load.summary`), ``None``
    where it was not measured."""
    return load_mod.summary(
        [(run.others_cpus, run.host_cpus, run.wall_s) for r in results for run in r.runs if run.others_cpus is not None]  # type: ignore[misc]
    )


def choose(results: Sequence[Result], cuda: bool, withhold_share: float = load_mod.WITHHOLD_SHARE) -> Choice:
    """The recommendation (:class:`Choice`). Without CUDA, ``pin_memory=True`` rows are not
    ranked (torch starts no pin-memory thread, so any gap is noise). Among the rest: the
    fastest by median, and ``tied``, every configuration that cannot be told apart from it
    (:func:`apart`). The pick is the cheapest (:func:`_cost`) of the tied whose median is at
    least :data:`NEAR_FASTEST` of the fastest's; at equal cost, the faster median. So a
    configuration is never picked when another tied one is faster and no more costly, and the
    slowest of a tie is picked only when it is within 5 % of the fastest. The intervals are
    widened by other processes' load (:attr:`~.measure.Result.median_interval`), and when they
    used ``withhold_share`` of the machine's CPUs or more over the runs (below 1), ``withheld``
    says so and no recommendation is made."""
    ignored = tuple(r for r in results if r.config.pin_memory and not cuda)
    ranked = [r for r in results if r not in ignored] or list(results)
    top = best(ranked)
    tied = tuple(sorted((r for r in ranked if r is top or not apart(r, top)), key=lambda r: (_cost(r), -r.throughput)))
    near = [r for r in tied if r is top or r.throughput >= NEAR_FASTEST * top.throughput]
    busy = machine_load(results)
    withheld = ""
    if busy is not None and withhold_share < 1 and busy.share >= withhold_share:
        withheld = (
            f"the machine was busy: other processes used {busy.others_cpus:.2f} of {busy.host_cpus} CPUs during "
            f"the runs, at least {withhold_share:.0%} of them"
        )
    return Choice(near[0], tied, ignored if len(ranked) < len(results) else (), withheld)


def knee(results: Sequence[Result]) -> Result:
    """The smallest ``num_workers`` whose throughput is within 5% of the best."""
    top = best(results).throughput
    near = [r for r in results if r.throughput >= KNEE_FRACTION * top]
    return min(near, key=lambda r: (r.config.num_workers, -r.throughput))


NOISE_MARGIN = 1.05  # a throughput this far above the ceiling is reported as a noisy run


def ceiling(results: Sequence[Result], usable: float, cpu_bound: bool) -> Dict[int, float]:
    """The physical ceiling of a CPU-bound dataset's throughput, samples/s: the ``usable`` CPUs
    divided by the least CPU time per sample measured over ``results`` (seconds, main and its
    workers together, over each run's steady window: :attr:`Result.cpu_per_sample_s`). No
    configuration loads faster than every usable CPU working at the cheapest per-sample cost
    measured. No configuration is assumed to use one core: with ``num_workers=0`` main's
    intra-op threads may keep several busy, and its measured CPU time says so.

    Returns the same ceiling for every ``num_workers`` in ``results`` (for the table and the
    JSON), or ``{}`` when the dataset is not CPU-bound or no CPU time per sample was measured.
    """
    if not cpu_bound or usable <= 0:
        return {}
    costs = [c for c in (r.cpu_per_sample_s for r in results) if c]
    if not costs:
        return {}
    top = usable / min(costs)
    return {r.config.num_workers: top for r in results}


def free_share(r: Result) -> float:
    """The share of the usable CPUs other processes left to ``r``'s runs: 1 - the median of
    their CPUs over the machine's (:attr:`~.measure.Run.others_cpus` / ``host_cpus``, spread
    evenly over the machine's CPUs as far as this can tell), at least 0.1; 1 where not measured."""
    shares = [run.others_cpus / run.host_cpus for run in r.runs if run.others_cpus is not None and run.host_cpus]
    if not shares:
        return 1.0
    return max(0.1, 1.0 - statistics.median(shares))


def of_ceiling(r: Result, ceilings: Dict[int, float]) -> Optional[float]:
    """``r``'s median throughput over the ceiling for the CPUs other processes left free during
    its runs (the ceiling × :func:`free_share`): other processes' load is not counted as the
    loader's inefficiency. ``None`` without a ceiling."""
    ceil = ceilings.get(r.config.num_workers)
    return r.throughput / (ceil * free_share(r)) if ceil else None


def ceiling_text(results: Sequence[Result], usable: float, ceilings: Dict[int, float]) -> Optional[str]:
    """Two lines saying how the ceiling and the ``of ceiling`` column were computed, or ``None``
    without a ceiling."""
    if not ceilings:
        return None
    cost, label = min((r.cpu_per_sample_s, r.config.label()) for r in results if r.cpu_per_sample_s)
    return (
        f"ceiling (CPU-bound): {usable:g} usable CPUs / {cost * 1000:.2f} ms of CPU per sample "
        f"(the least measured, {label}) = {next(iter(ceilings.values())):.0f} samples/s\n"
        "of ceiling: each median / (the ceiling x the share of the machine's CPUs other processes left free during "
        "its runs, from /proc/stat): their load is not counted as the loader's"
    )


def noise_warnings(results: Sequence[Result], ceilings: Dict[int, float]) -> List[str]:
    """A warning for each configuration measured more than 5% above its ceiling: only noise
    (a disturbed calibration or window) can do that."""
    out = []
    for r in results:
        ceil = ceilings.get(r.config.num_workers)
        if ceil and r.throughput > NOISE_MARGIN * ceil:
            out.append(
                f"{r.config.label()}: measured above the physical ceiling ({r.throughput / ceil:.0%}): a noisy run; "
                "use more --samples or --repeats"
            )
    return out


def warnings_for(results: Sequence[Result], machine: dict, batch_bytes: Optional[int]) -> List[str]:
    """Warnings: more workers than usable CPUs; prefetched batches near available memory."""
    out = []
    usable = machine["usable_cpus"]
    over = sorted({r.config.num_workers for r in results if r.config.num_workers > usable})
    if over:
        how = f"affinity {machine['cpu_affinity']}" + (
            f", cgroup quota {machine['cgroup_cpu_quota']:g}" if machine["cgroup_cpu_quota"] else ""
        )
        out.append(f"num_workers {', '.join(map(str, over))} exceed the {usable:g} CPUs this process may use ({how})")
    if batch_bytes:
        for r in results:
            c = r.config
            inflight = max(c.num_workers, 1) * c.prefetch_factor * batch_bytes * (2 if c.pin_memory else 1)
            if inflight > 0.5 * machine["mem_available_bytes"]:
                out.append(
                    f"{c.label()}: num_workers × prefetch_factor × batch "
                    f"bytes{' (×2 pinned copies)' if c.pin_memory else ''} = {inflight / 2**30:.1f} GiB, over half "
                    "the available memory"
                )
    for r in results:
        out.extend(f"{r.config.label()}: {n}" for n in r.notes)
    return out


def _fmt(v: Optional[float], scale: float = 1.0, digits: int = 1) -> str:
    return "-" if v is None else f"{v / scale:.{digits}f}"


def table(results: Sequence[Result], ceilings: Dict[int, float]) -> str:
    """Sorted by throughput; ``*`` marks the best, ``knee`` the smallest num_workers within 5%."""
    top, bend = best(results), knee(results)
    rows = []
    for r in sorted(results, key=lambda r: -r.throughput):
        lo, hi = r.throughput_span
        mark = ("*" if r is top else "") + (" knee" if r is bend else "")
        eff = of_ceiling(r, ceilings)
        rows.append(
            [
                mark.strip(),
                r.config.label(),
                f"{r.throughput:.0f}",
                f"{lo:.0f}–{hi:.0f}",
                _fmt(r.median("first_batch_s"), digits=2),
                _fmt(r.median("total_s"), digits=2),
                _fmt(r.median("peak_uss_bytes"), 2**20, 0),
                _fmt(r.median("peak_shm_bytes"), 2**20, 0),
                _fmt(r.median("peak_fds"), digits=0),
                _fmt(r.cpu_utilisation, digits=2),
                "-" if eff is None else f"{eff:.0%}",
                _fmt(r.others_cpus, digits=2),
                _fmt(r.median("h2d_bytes_per_s"), 2**30, 2),
            ]
        )
    return tabulate(
        rows,
        headers=[
            "",
            "configuration",
            "samples/s",
            "min–max",
            "1st batch s",
            "total s",
            "USS MiB",
            "shm MiB",
            "fds",
            "CPUs",
            "of ceiling",
            "others' CPUs",
            "H2D GiB/s",
        ],
    )


def document(
    results: Sequence[Result],
    machine: dict,
    settings: dict,
    ceilings: Dict[int, float],
    warnings: Iterable[str],
    choice: Optional[Choice] = None,
    partial: str = "",
) -> dict:
    """Everything measured, for ``--json``: ``best`` is the recommendation (:func:`choose`: of
    those that cannot be told apart from the fastest, the cheapest within 5 % of its median;
    ``None`` when withheld, ``verdict_withheld`` then saying why), ``fastest`` the highest
    median, ``tied`` every configuration that cannot be told apart from it, ``unranked`` those
    whose setting has no effect here, ``machine_load`` other processes' CPU use over the runs
    (``others_cpus`` of ``host_cpus``, over ``wall_s``), ``partial`` why the measurement
    stopped early (empty when it ran to its end)."""
    choice = choice or choose(results, any(run.cuda for r in results for run in r.runs))
    bend = knee(results)
    busy = machine_load(results)
    return {
        "partial": partial,
        "machine": machine,
        "machine_load": None if busy is None else vars(busy) | {"share": busy.share},
        "verdict_withheld": choice.withheld,
        "settings": settings,
        "best": None if choice.withheld else choice.pick.config.as_dict(),
        "fastest": best(results).config.as_dict(),
        "tied": [r.config.as_dict() for r in choice.tied],
        "unranked": [r.config.as_dict() for r in choice.ignored],
        "knee": bend.config.as_dict(),
        "warnings": list(warnings),
        "results": [
            {
                "config": r.config.as_dict(),
                "samples_per_s_median": r.throughput,
                "samples_per_s_min": r.throughput_span[0],
                "samples_per_s_max": r.throughput_span[1],
                "cv": r.cv,
                "first_batch_s_median": r.median("first_batch_s"),
                "total_s_median": r.median("total_s"),
                "peak_uss_bytes_median": r.median("peak_uss_bytes"),
                "peak_shm_bytes_median": r.median("peak_shm_bytes"),
                "peak_fds_median": r.median("peak_fds"),
                "cpu_utilisation": r.cpu_utilisation,
                "cpu_per_sample_s_median": r.cpu_per_sample_s,
                "ceiling_samples_per_s": ceilings.get(r.config.num_workers),
                "of_ceiling": of_ceiling(r, ceilings),
                "others_cpus_median": r.others_cpus,
                "h2d_bytes_per_s_median": r.median("h2d_bytes_per_s"),
                "notes": r.notes,
                "runs": [vars(run) | {"throughput": run.throughput} for run in r.runs],
            }
            for r in results
        ],
    }


def write_json(path: str, doc: dict) -> None:
    """``doc`` as JSON to ``path``, never through a link planted there or beside it
    (:func:`probes.outfile.write_text`). Raises OSError when it cannot be written."""
    write_text(path, json.dumps(doc, indent=1) + "\n")


def write_csv(path: str, doc: dict) -> None:
    """One row per run, with the configuration, the run's measurements, the machine and
    ``partial`` (why the measurement stopped early; empty when it ran to its end). With no run,
    the header and nothing else."""
    machine = {f"machine_{k}": v for k, v in doc["machine"].items()}
    rows = []
    for res in doc["results"]:
        for i, run in enumerate(res["runs"]):
            rows.append({**res["config"], "repeat": i, **run, **machine, "partial": doc.get("partial", "")})
    f = io.StringIO(newline="")
    writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["partial"])
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, f.getvalue())  # never through a planted link (probes.outfile)


def plot(path: str, results: Sequence[Result]) -> None:
    """Throughput against num_workers, one line per pin_memory, with the min–max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for pin in sorted({r.config.pin_memory for r in results}):
        series = sorted((r for r in results if r.config.pin_memory == pin), key=lambda r: r.config.num_workers)
        by_w: Dict[int, Result] = {}
        for r in series:  # other grid axes: keep the best per num_workers
            if r.config.num_workers not in by_w or r.throughput > by_w[r.config.num_workers].throughput:
                by_w[r.config.num_workers] = r
        ws = sorted(by_w)
        ax.plot(ws, [by_w[w].throughput for w in ws], marker="o", label=f"pin_memory={pin}")
        ax.fill_between(
            ws, [by_w[w].throughput_span[0] for w in ws], [by_w[w].throughput_span[1] for w in ws], alpha=0.2
        )
    ax.set_xticks(sorted({r.config.num_workers for r in results}))
    ax.set_xlabel("num_workers")
    ax.set_ylabel("samples/s (median, min–max band)")
    no_cuda = not any(run.cuda for r in results for run in r.runs)
    ax.set_title(
        "DataLoader throughput"
        + (
            " (no CUDA: pin_memory has no effect; differences are noise)"
            if no_cuda and len({r.config.pin_memory for r in results}) > 1
            else ""
        ),
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, dpi=100, format=os.path.splitext(path)[1][1:].lower() or "png")
    plt.close(fig)
    write_bytes(path, image.getvalue())  # never through a planted link (probes.outfile)
