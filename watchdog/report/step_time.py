"""Where the step time goes, for the HTML report (``dlwatch show --html``, issue #38): over the
last ``WINDOW_S`` seconds of a report's timeline (the input-bound verdict's own window, NOTE [
Input-bound verdict ] in watchdog/diagnose/throughput.py: from the sample before main's first
iterator when that is later), main's time split between waiting
for data inside ``__next__`` and the rest (its step), and the DataLoader workers' time split
between cpu, runnable, io and idle; time while main or a worker was stopped (state ``T``/``t``:
NOTE [ Stopped jobs ] in watchdog/diagnose/worker_time.py) is its own part, ``stopped``.

Read from what every report holds, the timeline (``report.json``'s ``timeline``: per sample,
each process's ``state``, ``wchan`` and ``cpu_s``, and each iterator's ``[pid, iterator, epoch,
batches, wait_s, waiting]``). Between two samples a worker's CPU seconds (at most the wall time)
are ``cpu``; the rest goes to the state it was seen in at the later sample (the earlier one when
running then): asleep in a poll (``IDLE_WCHANS``: PyTorch's wait for indices) ``idle``, another
sleep or state ``D`` ``io``, running at both ``runnable``. The report holds no run-queue reads
(``/proc/PID/schedstat``), so ``runnable`` here is time seen in state ``R`` without using a CPU:
an estimate, as the live verdict's is when it reads no run queue. A report is data another user
may have written: any value of the wrong type makes :func:`step_time` return ``None``, never
raise.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..diagnose.throughput import WINDOW_S
from ..diagnose.worker_time import IDLE_WCHANS
from ..types import ROLE_MAIN, ROLE_WORKER, STOPPED_STATES

MAIN_PARTS = ("data wait", "step and the rest", "stopped")
WORKER_PARTS = ("cpu", "runnable", "io", "idle", "stopped")
# What each part means, for the page's table.
MEANING = {
    "data wait": "main inside __next__, waiting for a batch",
    "step and the rest": "main's training step and anything else it does",
    "cpu": "computing (CPU time of its threads)",
    "runnable": "seen running without using a CPU: waiting for one (an estimate: no run-queue reads)",
    "io": "blocked in the Dataset: I/O, a sleep, a lock",
    "idle": "asleep in the poll of index_queue.get: waiting for indices",
    "stopped": "stopped (SIGSTOP, a debugger): not judged",
}
COLORS = {
    "data wait": "#d62728",
    "step and the rest": "#2ca02c",
    "cpu": "#1f77b4",
    "runnable": "#ff7f0e",
    "io": "#9467bd",
    "idle": "#bcbd22",
    "stopped": "#7f7f7f",
}


@dataclass(frozen=True)
class StepTime:
    """Seconds of the window per part: ``main`` by :data:`MAIN_PARTS`, ``workers`` by
    :data:`WORKER_PARTS` summed over the ``workers`` workers seen; ``window_s`` the seconds of
    timeline read."""

    window_s: float
    main: Tuple[Tuple[str, float], ...]
    workers: Tuple[Tuple[str, float], ...]
    n_workers: int

    @staticmethod
    def shares(parts: Sequence[Tuple[str, float]]) -> List[Tuple[str, float]]:
        """``(part, share 0..1)`` of ``parts``; all 0 when they hold no time."""
        total = sum(v for _, v in parts)
        return [(k, v / total if total > 0 else 0.0) for k, v in parts]


class _Bad(Exception):
    """A value of the report of the wrong type or out of range."""


def _num(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise _Bad
    return float(x)


def _blocked(p: dict) -> Optional[str]:
    """``io``, ``idle`` or ``None`` (running) for the state a process was seen in."""
    state, wchan = p.get("state"), p.get("wchan") or ""
    if not isinstance(state, str) or not isinstance(wchan, str):
        raise _Bad
    if state == "R":
        return None
    return "idle" if state in ("S", "I") and any(w in wchan for w in IDLE_WCHANS) else "io"


def _procs(sample: dict) -> Dict[int, dict]:
    procs = sample.get("processes") or []
    if not isinstance(procs, list) or not all(isinstance(p, dict) for p in procs):
        raise _Bad
    return {int(_num(p.get("pid"))): p for p in procs if p.get("role") in (ROLE_MAIN, ROLE_WORKER)}


def _main_pid(sample: dict) -> Optional[int]:
    mains = [pid for pid, p in _procs(sample).items() if p.get("role") == ROLE_MAIN]
    return mains[0] if mains else None


def _waits(sample: dict, main_pid: Optional[int]) -> Dict[Tuple[float, float], float]:
    """``(pid, iterator) -> seconds main spent in __next__`` (the wait in progress included)."""
    out: Dict[Tuple[float, float], float] = {}
    loaders = sample.get("loaders") or []
    if not isinstance(loaders, list):
        raise _Bad
    for entry in loaders:
        if not isinstance(entry, list) or len(entry) < 5:
            raise _Bad
        pid = _num(entry[0])
        if main_pid is not None and pid != main_pid:
            continue
        waiting = entry[5] if len(entry) > 5 and entry[5] is not None else 0.0
        out[(pid, _num(entry[1]))] = _num(entry[4]) + max(0.0, _num(waiting))
    return out


def step_time(doc: dict, window_s: float = WINDOW_S) -> Optional[StepTime]:
    """Where the time went over the last ``window_s`` seconds of ``doc``'s timeline (the module's
    docstring); ``None`` when it holds no iterator of main and no worker over two samples, or a
    value of the wrong type."""
    try:
        return _step_time(doc, window_s)
    except (_Bad, TypeError, ValueError, OverflowError, AttributeError):
        return None


def _step_time(doc: dict, window_s: float) -> Optional[StepTime]:
    timeline = doc.get("timeline") or []
    if not isinstance(timeline, list) or len(timeline) < 2 or not all(isinstance(s, dict) for s in timeline):
        return None
    times = [_num(s.get("t_mono")) for s in timeline]
    start = times[-1] - window_s
    picked = [(t, s) for t, s in zip(times, timeline) if t >= start]
    # from the sample before main's first iterator, as the verdict judges (throughput.since_first_iterator)
    made = [i for i, (_, s) in enumerate(picked) if _waits(s, _main_pid(s))]
    if made and made[0] >= 2:
        picked = picked[made[0] - 1 :]
    main_part = dict.fromkeys(MAIN_PARTS, 0.0)
    worker_part = dict.fromkeys(WORKER_PARTS, 0.0)
    workers: set = set()
    seen_main_wait = False
    prev: Optional[Tuple[float, Dict[int, dict], Dict[Tuple[float, float], float]]] = None
    for t, s in picked:
        procs = _procs(s)
        mains = [pid for pid, p in procs.items() if p.get("role") == ROLE_MAIN]
        waits = _waits(s, mains[0] if mains else None)
        if prev is not None and t > prev[0]:
            dt = t - prev[0]
            before, waits_before = prev[1], prev[2]
            stopped = any(p.get("state") in STOPPED_STATES for p in list(before.values()) + list(procs.values()))
            pairs = [(before[pid], p) for pid, p in procs.items() if p.get("role") == ROLE_WORKER and pid in before]
            if stopped:
                main_part["stopped"] += dt
                worker_part["stopped"] += dt * len(pairs)
            else:
                # signed, so that a wait in progress handed over to the total when its batch comes is
                # counted once; in the interval in which main made its first iterator, the time
                # before it is "the rest" (as the verdict counts it)
                seen_main_wait = seen_main_wait or bool(waits)
                gain = sum(w - waits_before.get(k, 0.0) for k, w in waits.items())
                wait = min(dt, max(0.0, gain))
                main_part["data wait"] += wait
                main_part["step and the rest"] += dt - wait
                for pa, pb in pairs:
                    cpu = min(dt, max(0.0, _num(pb.get("cpu_s")) - _num(pa.get("cpu_s"))))
                    worker_part["cpu"] += cpu
                    worker_part[_blocked(pb) or _blocked(pa) or "runnable"] += dt - cpu
            workers.update(int(_num(pb.get("pid"))) for _, pb in pairs)
        prev = (t, procs, waits)
    if not seen_main_wait and not workers:
        return None
    if not seen_main_wait:  # no inside view: main's split is not known, its stopped time alone is no plot
        main_part = dict.fromkeys(MAIN_PARTS, 0.0)
    return StepTime(
        window_s=picked[-1][0] - picked[0][0],
        main=tuple(main_part.items()),
        workers=tuple(worker_part.items()),
        n_workers=len(workers),
    )


def plot(st: StepTime) -> bytes:
    """A PNG: two horizontal bars stacked to 100 % of the window, main's and the workers'.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(12, 2.4), dpi=90)
    ax = fig.add_axes((0.16, 0.25, 0.63, 0.6))
    rows = [("main", st.main), (f"workers ({st.n_workers}, mean)", st.workers)]
    for y, (_, parts) in enumerate(rows):
        left = 0.0
        for part, share in StepTime.shares(parts):
            if share <= 0:
                continue
            ax.barh(y, 100 * share, left=left, color=COLORS[part], label=part, edgecolor="white", height=0.6)
            if share >= 0.06:
                ax.text(left + 50 * share, y, f"{100 * share:.0f} %", ha="center", va="center", fontsize=8)
            left += 100 * share
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"% of the last {st.window_s:.0f} s")
    ax.set_title("Where the step time goes")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        ax.legend(
            unique.values(), unique.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0
        )
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
