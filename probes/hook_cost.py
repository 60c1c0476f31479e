"""``dlwatch probe hook-cost``: what the inside view's recorder costs the job, measured side by
side. Each round runs the same loader twice, once with the recorder (``watchdog/bootstrap`` on
``PYTHONPATH``) and once without, in alternating order; the job times its own loop after a
warm-up. Reported: batches per second with and without, their ratio (median over rounds), the
time per batch the recorder adds, and the memory it holds (its shared file and JSON record).

Loaders measured (each epoch timed three times, the best kept): ``typical`` (2 workers,
batches of 32 small images, 1 ms of work per batch in the loop, as a light training step),
``tiny-batches`` (2 workers, a batch of one 4-byte tensor, no work in the loop) and
``in-process`` (``num_workers=0``, the same tiny batches: nothing but the loader's own Python,
so the difference is the recorder's whole per-batch cost).

Each loader's line says how busy the machine was during its runs (other processes' CPU time,
:mod:`probes.bench.load`); at or above half its CPUs a cost above the noise is marked
``withheld, busy machine``.

Progress goes to stderr, a line as each round ends. Stopped by SIGINT or SIGTERM, or when a run
fails or passes ``--timeout``, it kills the run in progress with its workers, removes the
recorder's private folder, and prints and writes (``--json``) the rounds finished so far,
marked ``partial`` (:mod:`probes.bench.stop`, as ``bench`` does); ``--json`` holds
``{"partial": why or "", "results": [one object per loader]}``.

Exit codes (:class:`watchdog.exits.Exit`): 0 done; 1 a run failed or timed out; 2 a bad flag
(one line); 130 or 143 stopped by SIGINT or SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from tabulate import tabulate

from watchdog.argtypes import one_line
from watchdog.collect import inside
from watchdog.exits import Exit, of_signal

from .cli import Parser, choice_list, int_range, output_file, positive_seconds, say_estimate
from .env import python
from .outfile import write_text

JOB = textwrap.dedent(
    """
    import json, os, sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset):
        def __init__(self, n, shape):
            self.n, self.shape = n, shape
        def __len__(self):
            return self.n
        def __getitem__(self, i):
            return torch.full(self.shape, float(i % 7))

    batches, batch_size, shape, step_ms, workers = int(sys.argv[1]), int(sys.argv[2]), \\
        tuple(map(int, sys.argv[3].split("x"))), float(sys.argv[4]), int(sys.argv[5])
    loader = DataLoader(Images(batches * batch_size, shape), batch_size=batch_size, num_workers=workers, \\
        persistent_workers=workers > 0)
    for _ in loader:  # warm-up epoch: workers started, caches filled
        pass
    elapsed = float("inf")
    for _ in range(3):  # the best of three epochs: the least disturbed by the rest of the machine
        t0 = time.perf_counter()
        n = 0
        for _ in loader:
            n += 1
            if step_ms:
                end = time.perf_counter() + step_ms / 1000
                while time.perf_counter() < end:
                    pass
        elapsed = min(elapsed, time.perf_counter() - t0)
    state = sys.modules.get("_dlwatch_inside")
    record = len(json.dumps(state._STATE.iterators)) if state is not None and state._STATE is not None else 0
    print(json.dumps({"batches": n, "seconds": elapsed, "record_bytes": record}))
    """
)

# A typo guard for --rounds.
MAX_ROUNDS = 1000

LOADERS: Dict[str, Tuple[int, int, str, float, int]] = {
    # name: (batches per epoch, batch_size, sample shape, loop work per batch in ms, num_workers)
    "typical": (300, 32, "3x32x32", 1.0, 2),
    "tiny-batches": (2000, 1, "1", 0.0, 2),
    "in-process": (20000, 1, "1", 0.0, 0),
}


def _run_once(loader: str, hooked: bool, timeout_s: float, cwd: str) -> dict:
    """One run of ``loader`` in a fresh Python (``-s -P``, :func:`probes.env.python`) started in
    the private folder ``cwd``, in a session of its own; with ``hooked``, the
    recorder in it with a private folder of its own. Whatever ends it early (its timeout, an
    interruption) kills it with its workers and removes the folder.

    Raises:
        RuntimeError: the run failed or took more than ``timeout_s`` seconds.
    """
    from watchdog.children import end_tree

    batches, batch_size, shape, step_ms, workers = LOADERS[loader]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", inside.FORMAT.ENV_DIR, inside.FORMAT.ENV_ANCESTOR)
    }
    folder = inside.make_folder() if hooked else None
    proc: Optional[subprocess.Popen] = None
    try:
        if folder:
            env = inside.hook_env(env, folder.path, os.getpid())  # PYTHONPATH: the bootstrap alone
        # The same flags with the recorder and without: -s -P, in a private working directory
        # (the caller's may be one another user writes: a torch.py there must not be imported).
        cmd = python("-c", JOB, str(batches), str(batch_size), shape, str(step_ms), str(workers))
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        out, err = proc.communicate(timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"{loader} run failed (exit {proc.returncode}): {err.strip()[-300:]}")
        result = json.loads(out.strip().splitlines()[-1])
        if folder:
            result["file_bytes"] = sum(os.path.getsize(os.path.join(folder.path, n)) for n in os.listdir(folder.path))
        return result
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{loader} run timed out after {timeout_s:g} s") from None
    finally:
        if proc is not None and proc.poll() is None:  # timed out or interrupted: the job and its workers go
            end_tree(proc, grace_s=0.0, reap_s=10.0)
        if folder:
            inside.remove_folder(folder)


@dataclass
class Rounds:
    """The paired rounds of one loader measured so far: batches/s without (``plain``) and with
    (``hooked``) the recorder, one of each a round, and the recorder's footprint (bytes) in
    the last hooked run."""

    loader: str
    plain: List[float] = field(default_factory=list)
    hooked: List[float] = field(default_factory=list)
    record_bytes: int = 0
    file_bytes: int = 0


def measure(loader: str, rounds: int, timeout_s: float, so_far: Optional[Rounds] = None) -> dict:
    """Paired runs of ``loader``: ``rounds`` with and ``rounds`` without the recorder, in
    alternating order, each round noted in ``so_far`` (when given) as it ends and said on
    stderr. Returns :func:`summary` of them.

    Raises:
        RuntimeError: a run failed or timed out (``so_far`` holds the rounds before it), or no
            private working directory could be made for the runs.
    """
    done = so_far if so_far is not None else Rounds(loader)
    try:
        cwd = tempfile.mkdtemp(prefix="dlwatch-probe-cwd-")  # 0700: the runs' working directory
    except OSError as e:
        raise RuntimeError(f"cannot make a private folder for the runs: {e.strerror or e}") from None
    try:
        for i in range(rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            rates = {}
            for h in order:
                r = _run_once(loader, h, timeout_s, cwd)
                rates[h] = r["batches"] / r["seconds"]
                if h:
                    done.record_bytes, done.file_bytes = r["record_bytes"], r.get("file_bytes", 0)
            done.plain.append(rates[False])
            done.hooked.append(rates[True])
            print(
                f"hook-cost: {loader}: round {i + 1}/{rounds}: {rates[False]:.0f} batches/s plain, "
                f"{rates[True]:.0f} hooked",
                file=sys.stderr,
                flush=True,
            )
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    return summary(done)


def summary(done: Rounds) -> dict:
    """The figures of ``done`` (at least one round): rates (batches/s, medians), the median
    ratio hooked/plain and its spread over the rounds (``ratio_min``, ``ratio_max``), the added
    time per batch (µs, from the medians, with :func:`added_interval` and :func:`added_text`)
    and the recorder's footprint (bytes).

    Raises:
        ValueError: no round in ``done``.
    """
    if not done.plain:
        raise ValueError(f"{done.loader}: no round measured")
    ratios = [h / p for h, p in zip(done.hooked, done.plain)]
    plain_rate, hooked_rate = statistics.median(done.plain), statistics.median(done.hooked)
    added = [(1 / h - 1 / p) * 1e6 for h, p in zip(done.hooked, done.plain)]  # each round's pair, µs a batch
    lo, hi = added_interval(added)
    median_us = (1 / hooked_rate - 1 / plain_rate) * 1e6
    return {
        "loader": done.loader,
        "rounds": len(done.plain),
        "plain_batches_per_s": plain_rate,
        "hooked_batches_per_s": hooked_rate,
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "added_us_per_batch": median_us,
        "added_us_interval": [lo, hi],
        "added_is_noise": not lo > 0,
        "added": added_text(median_us, lo, hi),
        "record_bytes": done.record_bytes,
        "file_bytes": done.file_bytes,
        "partial": "",
    }


def added_interval(added_us: List[float]) -> Tuple[float, float]:
    """The interval of the median of the rounds' added µs a batch (each round's pair: 1 / the
    hooked rate - 1 / the plain rate): the distribution-free interval of the median
    (:func:`probes.bench.measure.median_interval`; up to 5 rounds, their whole range); with one
    round, that round's value at both ends."""
    from .bench.measure import median_interval

    return median_interval(added_us)


def added_text(median_us: float, lo: float, hi: float) -> str:
    """The recorder's added time a batch as a person should read it: ``12.3 (8.1–15.0)`` µs
        when the whole interval lies above 0, else ``within noise (±X µs)``, X the larger distance
        of the interval's ends from 0: a negative difference is never printed as a cost. With one
        round (``lo == hi``) no interval exists: a positive value is given as such, ``(one round: no
    interval)``, any other as ``within noise (±X µs, one round)``."""
    if lo == hi:
        if median_us > 0:
            return f"{median_us:.1f} (one round: no interval)"
        return f"within noise (±{abs(median_us):.1f} µs, one round)"
    if lo > 0:
        return f"{median_us:.1f} ({lo:.1f}–{hi:.1f})"
    return f"within noise (±{max(abs(lo), abs(hi)):.1f} µs)"


# Seconds one paired round (a run with the recorder and one without) takes on a 2-core VM
# (2026-12-05: `--rounds 1 --loaders typical` in 11.2 s).
ROUND_S = 11.0


def estimate_s(loaders: int, rounds: int) -> float:
    """About how many seconds ``rounds`` paired rounds of each of ``loaders`` loaders take on a
    2-core machine."""
    return loaders * rounds * ROUND_S


def main(argv: Optional[List[str]] = None) -> int:
    """Measure each loader and print the table; see the module docstring."""
    p = Parser(prog="dlwatch probe hook-cost", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--rounds", type=int_range(1, MAX_ROUNDS), default=5, help=f"paired rounds per loader, from 1 to {MAX_ROUNDS}"
    )
    p.add_argument(
        "--loaders", type=choice_list(LOADERS), default=",".join(LOADERS), help="comma list of: " + ", ".join(LOADERS)
    )
    p.add_argument("--json", type=output_file, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--timeout", type=positive_seconds, default=300.0, help="seconds per run (above 0, up to a day)")
    args = p.parse_args(argv)  # each flag checked (its type), one line naming it
    names = [n.strip() for n in args.loaders.split(",")]
    say_estimate(
        "hook-cost",
        estimate_s(len(names), args.rounds),
        f"{len(names)} loader(s) x {args.rounds} round(s) of two runs, about {ROUND_S:g} s a round",
    )
    from .bench import load as load_mod
    from .bench import stop

    results: List[dict] = []
    current: Optional[Rounds] = None
    previous = stop.catch_signals()
    try:
        for i, name in enumerate(names, 1):
            print(f"hook-cost: [{i}/{len(names)}] {name}: {args.rounds} paired round(s) …", file=sys.stderr, flush=True)
            meter = load_mod.LoadMeter()
            current = Rounds(name)
            r = measure(name, args.rounds, args.timeout, current)
            current = None
            busy = meter.stop()
            r["machine_load"] = None if busy is None else vars(busy) | {"share": busy.share}
            if load_mod.withheld(busy) and not r["added_is_noise"]:  # other processes could have made the gap
                r["added"] = f"withheld, busy machine: {r['added']}"
            print(f"hook-cost: {name}: {load_mod.busy_line(busy, 'its runs', verdict=False)}")
            results.append(r)
    except stop.Interrupted as e:
        stop.hold_signals()  # a second signal must not cut the partial output short
        print(f"dlwatch: interrupted ({e.name}); the run in progress was stopped", file=sys.stderr)
        _output(_with_partial(results, current, f"stopped by {e.name}"), args.json, f"stopped by {e.name}")
        return of_signal(e.signum)
    except RuntimeError as e:
        stop.hold_signals()
        print(f"dlwatch: {e}", file=sys.stderr)
        why = f"a run failed: {one_line(str(e), 300)}"
        _output(_with_partial(results, current, why), args.json, why)
        return Exit.FAILED
    finally:
        stop.restore(previous)
    return Exit.OK if _output(results, args.json, "") else Exit.FAILED


def _with_partial(results: List[dict], current: Optional[Rounds], why: str) -> List[dict]:
    """``results`` and the rounds of the loader in progress (``current``, when it finished one),
    that one marked ``partial`` with ``why``."""
    if current is None or not current.plain:
        return results
    return results + [summary(current) | {"partial": why, "machine_load": None}]


def _output(results: List[dict], json_path: Optional[str], partial: str) -> bool:
    """Print the table of ``results`` (and, for a ``partial`` run, why it stopped first) and
    write them to ``json_path`` when given (``{"partial": ..., "results": [...]}``,
    :func:`probes.outfile.write_text`: a temporary file made exclusively, renamed into place).
    Returns whether the file was written (or none asked for); when it could not be, says so in
    one line on stderr. Raises nothing of its own."""
    if partial:
        rounds = sum(r["rounds"] for r in results)
        print(f"partial: {partial}: the {rounds} round(s) finished so far follow", flush=True)
    rows = [
        [
            r["loader"] + (" (partial)" if r["partial"] else ""),
            r["rounds"],
            f"{r['plain_batches_per_s']:.0f}",
            f"{r['hooked_batches_per_s']:.0f}",
            f"{r['ratio']:.3f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})",
            r["added"],
            f"{r['file_bytes'] / 1024:.1f}",
            f"{r['record_bytes'] / 1024:.1f}",
        ]
        for r in results
    ]
    if rows or not partial:
        print(
            tabulate(
                rows,
                headers=[
                    "loader",
                    "rounds",
                    "batches/s plain",
                    "batches/s hooked",
                    "ratio (median, min–max)",
                    "µs added/batch (median, interval)",
                    "files KiB",
                    "record KiB",
                ],
            ),
            flush=True,
        )
    else:
        print("no round had finished: nothing measured", flush=True)
    if json_path:
        try:  # never through a link planted at the path or beside it (probes.outfile)
            write_text(json_path, json.dumps({"partial": partial, "results": results}, indent=1) + "\n")
        except OSError as e:
            print(f"dlwatch: error: cannot write --json {json_path!r}: {e.strerror or e}", file=sys.stderr)
            return False
    return True


if __name__ == "__main__":
    sys.exit(main())
