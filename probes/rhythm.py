"""``dlwatch probe rhythm``: how irregular is a healthy loader's rhythm? The measurement behind
the batch-rhythm stall rule's defaults (``stall_min_s``, ``stall_p99_factor`` in config.yaml).

Runs healthy ``probes.train`` variants one after another (``--rounds`` times, each round running
every variant once, so that the machine's drift falls on all alike) with the inside view's recorder on
(``watchdog/bootstrap``), and reads each iterator's histogram of intervals between batches:
p50, p99 and the longest interval (each as its bucket's upper bound, so within a quarter
octave). The rule declares a stall after ``max(stall_min_s, k × p99)`` with no batch; a healthy
run whose longest interval exceeds ``k × p99`` would have been examined. The table shows
``longest / p99`` per run and the largest over all runs, with the spread of each round's
largest: ``k`` must sit well above it. ``--load N`` runs N busy processes (a Python spin
loop, as ``stress --cpu N``) beside the variants for the whole measurement and kills them at
its end: a loaded machine's tail is longer than an idle one's (issue #34: 13.33 at load 6).

Progress goes to stderr, a line as each run starts and ends. Stopped by SIGINT or SIGTERM, it
ends the run in progress (its job, in a session of its own, and the job's workers), removes the
recorder's folder and its private ``TMPDIR``, prints the rows measured so far and writes them to
``--json`` as ``{"partial": why, "rows": [...]}``.

Exit codes (:class:`watchdog.exits.Exit`): 0 done; 1 a run failed; 2 a bad flag or variant
(one line); 130 or 143 stopped by SIGINT or SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from tabulate import tabulate

from watchdog.collect import inside
from watchdog.exits import Exit, of_signal

from . import module_name
from .cli import Parser, int_range, output_file, positive_seconds, say_estimate
from .env import child_env, python

MAX_ROUNDS = 20
MAX_LOAD = 256

# Healthy variants: name -> probes.train arguments. Each must end with exit code 0.
VARIANTS: Dict[str, Sequence[str]] = {
    "fast, 2 workers": ("--num-workers", "2", "--samples", "2048", "--epochs", "2"),
    "fast, 4 workers, batch 8": ("--num-workers", "4", "--batch-size", "8", "--samples", "2048", "--epochs", "1"),
    "1 worker": ("--num-workers", "1", "--samples", "1024", "--epochs", "1"),
    "in-process (num_workers=0)": ("--num-workers", "0", "--samples", "1024", "--epochs", "1"),
    "slow samples (sleep 20 ms)": (
        "--num-workers",
        "2",
        "--sample-delay-s",
        "0.02",
        "--samples",
        "512",
        "--epochs",
        "1",
    ),
    "CPU work per sample (5 ms)": ("--num-workers", "2", "--cpu-ms", "5", "--samples", "1024", "--epochs", "1"),
    "busy thread in main": ("--num-workers", "2", "--busy-thread", "--samples", "1024", "--epochs", "1"),
    "persistent workers, validation between epochs": (
        "--num-workers",
        "2",
        "--persistent-workers",
        "--validate-s",
        "1",
        "--samples",
        "1024",
        "--epochs",
        "3",
    ),
    "spawn workers": ("--num-workers", "2", "--multiprocessing-context", "spawn", "--samples", "1024", "--epochs", "1"),
}


def _upper_of_longest(hist: Sequence[int]) -> Optional[float]:
    top = max((i for i, n in enumerate(hist) if n), default=None)
    return None if top is None else inside.FORMAT.bucket_bounds_s(top)[1]


def measure_variant(args: Sequence[str], timeout_s: float) -> List[dict]:
    """Run ``python -m probes.train ARGS`` with the recorder on; one dict per iterator:
    ``batches``, ``intervals``, ``p50_s``, ``p99_s``, ``longest_s``.

    Raises:
        RuntimeError: the run failed or timed out.
    """
    folder = inside.make_folder()
    proc: Optional[subprocess.Popen] = None
    cwd = tempfile.mkdtemp(prefix="dlwatch-probe-cwd-")
    try:
        env = inside.hook_env(child_env(), folder.path, os.getpid())  # probes.train found from any working directory
        # A session of its own: when this probe is stopped, the job and its workers are ended with it.
        # -s -P in a private folder: never a module from the caller's working directory, which
        # another user may write (probes.env.python).
        proc = subprocess.Popen(
            python("-m", module_name("train"), *args),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        _, err = proc.communicate(timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"exit code {proc.returncode}: {err.strip().splitlines()[-1:] or ''}")
        out = []
        for name in sorted(os.listdir(folder.path)):
            if not name.endswith(".bin"):
                continue
            with open(os.path.join(folder.path, name), "rb") as f:
                _, slots = inside.FORMAT.read_slots(f.read())
            for s in slots:
                hist = s["hist"]
                out.append(
                    {
                        "batches": s["batches"],
                        "intervals": sum(hist),
                        "p50_s": inside.percentile_s(hist, 0.5),
                        "p99_s": inside.percentile_s(hist, 0.99),
                        "longest_s": _upper_of_longest(hist),
                    }
                )
        return out
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout_s:g} s") from None
    finally:
        if proc is not None and proc.poll() is None:  # timed out or interrupted: the job and its workers go
            from .repro import kill_session

            kill_session(proc)
        inside.remove_folder(folder)
        shutil.rmtree(cwd, ignore_errors=True)


# Seconds one variant's run takes on a 2-core VM (2026-12-05: all 9 in 125 s, "1 worker" 14 s).
VARIANT_S = 14.0


def estimate_s(variants: int, rounds: int, load: int) -> float:
    """About how many seconds ``variants`` variants over ``rounds`` rounds take on a 2-core
    machine, ``load`` busy processes beside them sharing its 2 CPUs."""
    return variants * rounds * VARIANT_S * max(1.0, (2 + load) / 2)


def main(argv: Optional[List[str]] = None) -> int:
    """Measure every variant (or those named) and print the table; see the module docstring."""
    p = Parser(prog="dlwatch probe rhythm", description=__doc__.split("\n\n")[0])
    p.add_argument("variants", nargs="*", help=f"variants to run (default: all): {'; '.join(VARIANTS)}")
    p.add_argument("--json", type=output_file, metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--timeout", type=positive_seconds, default=300.0, help="seconds per run (above 0, up to a day)")
    p.add_argument(
        "--rounds", type=int_range(1, MAX_ROUNDS), default=1, help=f"rounds over the variants, from 1 to {MAX_ROUNDS}"
    )
    p.add_argument(
        "--load",
        type=int_range(0, MAX_LOAD),
        default=0,
        help=f"busy processes run beside the variants, from 0 to {MAX_LOAD} (0: none)",
    )
    args = p.parse_args(argv)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant {unknown[0]!r}")
    n = len(args.variants or VARIANTS)
    say_estimate(
        "rhythm",
        estimate_s(n, args.rounds, args.load),
        f"{n} variant(s) x {args.rounds} round(s), about {VARIANT_S:g} s each" + (" with --load" if args.load else ""),
    )
    busy = busy_loops(args.load)
    rows: List[dict] = []
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _measure(args, busy, rows)
    except Interrupted as e:
        for sig in previous:  # a second signal must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        name = signal.Signals(e.signum).name
        print(f"dlwatch: rhythm: stopped by {name}; the runs finished so far:", file=sys.stderr, flush=True)
        _print_rows(rows, busy, args.json, partial=f"stopped by {name}")
        return of_signal(e.signum)
    finally:
        stop_busy(busy)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived (``signum``): the measurement stops, its job is ended and its
    folders removed (the ``finally`` blocks run, which a signal's default action would skip)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, _frame) -> None:
    raise Interrupted(signum)


# A process that spins on a CPU until its parent is gone (checked every 10^5 iterations, a few
# ms): a measurement killed before its clean-up leaves no busy loop behind.
BUSY_LOOP = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(100000): pass\n"


def busy_loops(n: int) -> List[subprocess.Popen]:
    """Start ``n`` processes that spin on a CPU (:data:`BUSY_LOOP`), each in a session of its
    own; :func:`stop_busy` ends them, and each ends by itself once this process is gone."""
    return [
        subprocess.Popen(
            python("-c", BUSY_LOOP, isolated=True),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(n)
    ]


def stop_busy(procs: Sequence[subprocess.Popen]) -> None:
    """Kill the busy processes of :func:`busy_loops` (SIGKILL) and reap them; raises nothing."""
    for proc in procs:
        try:
            proc.kill()
        except OSError:
            pass
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _measure(args, busy: Sequence[subprocess.Popen], rows: List[dict]) -> int:
    """Run the variants round by round, adding each iterator's row to ``rows`` as it is
    measured and saying on stderr which run starts and what it measured (a measurement of
    minutes is never silent); then print the table and write ``--json``."""
    from .bench.load import LoadMeter, busy_line

    failed = 0
    meter = LoadMeter()
    names = args.variants or list(VARIANTS)
    total, done = args.rounds * len(names), 0
    for round_ in range(1, args.rounds + 1):
        for name in names:
            done += 1
            print(f"rhythm: [{done}/{total}] round {round_}: {name} …", file=sys.stderr, flush=True)
            started = time.monotonic()
            try:
                found = measure_variant(VARIANTS[name], args.timeout)
            except RuntimeError as e:
                print(f"dlwatch: {name}: {e}", file=sys.stderr)
                failed += 1
                continue
            kept = [r for r in found if r["intervals"] >= 20 and r["p99_s"]]  # the rule waits for 20 intervals too
            for r in kept:
                rows.append({"variant": name, "round": round_, **r, "longest_over_p99": r["longest_s"] / r["p99_s"]})
            worst = max((r["longest_s"] / r["p99_s"] for r in kept), default=None)
            print(
                f"rhythm: [{done}/{total}] {name}: {time.monotonic() - started:.0f} s, {len(kept)} iterator(s)"
                + (f", longest / p99 {worst:.2f}" if worst is not None else ""),
                file=sys.stderr,
                flush=True,
            )
    _print_rows(rows, busy, args.json)
    # The busy processes of --load are this probe's children, not yet waited for: they count as "other".
    print(busy_line(meter.stop(), "the runs", verdict=False) + "; a busy machine lengthens the tails measured")
    return Exit.FAILED if failed else Exit.OK


def _print_rows(
    rows: List[dict], busy: Sequence[subprocess.Popen], json_path: Optional[str], partial: str = ""
) -> None:
    """The table and the largest longest / p99; ``json_path`` gets the rows (as an object
    ``{"partial": why, "rows": [...]}`` when the measurement stopped early)."""
    table = [
        [
            r["variant"],
            r["round"],
            r["batches"],
            f"{r['p50_s'] * 1e3:.1f}",
            f"{r['p99_s'] * 1e3:.1f}",
            f"{r['longest_s'] * 1e3:.1f}",
            f"{r['longest_over_p99']:.2f}",
        ]
        for r in rows
    ]
    if partial:
        print(f"partial: {partial}: {len(rows)} iterator(s) measured before it stopped")
    print(tabulate(table, headers=["variant", "round", "batches", "p50 ms", "p99 ms", "longest ms", "longest / p99"]))
    if rows:
        largest = max(r["longest_over_p99"] for r in rows)
        per_round = [max(r["longest_over_p99"] for r in rows if r["round"] == k) for k in {r["round"] for r in rows}]
        spread = f" (each round's largest: {min(per_round):.2f}–{max(per_round):.2f})" if len(per_round) > 1 else ""
        beside = f", {len(busy)} busy process(es) beside them" if busy else ""
        print(f"\nlargest longest/p99 over {len(rows)} iterator(s){beside}: {largest:.2f}{spread}")
    if json_path:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(json_path)) or ".")
        with os.fdopen(fd, "w") as f:
            json.dump({"partial": partial, "rows": rows} if partial else rows, f, indent=1)
        os.replace(tmp, json_path)


if __name__ == "__main__":
    sys.exit(main())
