"""How busy the rest of the machine was while a measurement ran: the CPU time every process used
(``/proc/stat``) minus the CPU time of this process and the children it waited for
(``/proc/self/stat``: a benchmark run's child and, through it, the DataLoader workers it
joined), over the wall time. proc(5) documents both files: ``/proc/stat``'s first line holds
the time all CPUs spent in each mode since boot, in ``USER_HZ`` ticks (``user`` includes
``guest``, ``nice`` includes ``guest_nice``); ``/proc/PID/stat``'s fields 14-17 hold
``utime``, ``stime``, ``cutime`` and ``cstime`` in clock ticks.

A measurement whose machine was busy is told so, and its verdict is widened or withheld
(:data:`BUSY_SHARE`, :data:`WITHHOLD_SHARE`; :func:`widening`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

# Above this share of the machine's CPUs used by other processes (on average over a run), the
# machine counts as busy: the output says so and each run's interval is widened (:func:`widening`).
BUSY_SHARE = 0.10
# At or above this share the verdict is withheld: other processes could have halved the runs.
WITHHOLD_SHARE = 0.50

_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def machine_cpu_s(stat_path: str = "/proc/stat") -> Tuple[Optional[float], int]:
    """``(CPU seconds every CPU has spent busy since boot, number of CPUs)`` from ``stat_path``:
    user + nice + system + irq + softirq + steal of its ``cpu`` line (idle and iowait left
    out), and the count of its ``cpuN`` lines (at least 1). ``(None, cpus)`` when it cannot be
    read (not Linux). Raises nothing."""
    try:
        with open(stat_path, encoding="ascii") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None, os.cpu_count() or 1
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    for line in lines:
        if line.startswith("cpu "):
            try:
                v = [int(x) for x in line.split()[1:9]]
            except ValueError:
                break
            v += [0] * (8 - len(v))
            user, nice, system, _idle, _iowait, irq, softirq, steal = v
            return (user + nice + system + irq + softirq + steal) / _TICK, max(cpus, 1)
    return None, max(cpus, 1)


def own_cpu_s(pid: str = "self") -> Optional[float]:
    """CPU seconds of process ``pid`` and of the children it has waited for (utime + stime +
    cutime + cstime of ``/proc/PID/stat``), or ``None`` when it cannot be read. The command
    name (field 2) may hold spaces and parentheses, so the fields are counted after its last
    ``)``. Raises nothing."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
        fields = text[text.rindex(")") + 2 :].split()
        return sum(int(x) for x in fields[11:15]) / _TICK  # fields 14..17, counted from field 3
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Load:
    """Other processes' CPU use over one interval: ``others_cpus`` (their CPU seconds / the
    wall seconds: how many CPUs they kept busy on average), ``host_cpus`` (CPUs the machine
    has) and ``wall_s``."""

    others_cpus: float
    host_cpus: int
    wall_s: float

    @property
    def share(self) -> float:
        """``others_cpus`` as a share of the machine's CPUs (0..1)."""
        return min(1.0, self.others_cpus / self.host_cpus) if self.host_cpus else 0.0


class LoadMeter:
    """Measures :class:`Load` between :meth:`start` (or construction) and :meth:`stop`. The
    children whose time must count as this measurement's own must be waited for before
    :meth:`stop` (their time joins ``cutime`` only then)."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self._wall = time.monotonic()
        self._busy, self._cpus = machine_cpu_s()
        self._own = own_cpu_s()

    def stop(self) -> Optional[Load]:
        """The load since :meth:`start`, or ``None`` when ``/proc`` could not be read."""
        wall = time.monotonic() - self._wall
        busy, cpus = machine_cpu_s()
        own = own_cpu_s()
        if None in (busy, self._busy, own, self._own) or wall <= 0:
            return None
        others = max(0.0, (busy - self._busy) - (own - self._own))  # type: ignore[operator]
        return Load(others / wall, max(cpus, self._cpus), wall)


def widening(others_cpus: Optional[float], host_cpus: Optional[int]) -> float:
    """How much faster a run could have been without the other processes: ``M / (M - o)``
    for ``o`` of ``M`` CPUs kept busy by them (as if the run could use every CPU and the others
    took their share of each evenly), 1.0 without a measurement or below :data:`BUSY_SHARE`,
    at most 1 / (1 - :data:`WITHHOLD_SHARE`) (at or above it the verdict is withheld)."""
    if not others_cpus or not host_cpus:
        return 1.0
    share = min(others_cpus / host_cpus, WITHHOLD_SHARE)
    return 1.0 if share < BUSY_SHARE else 1.0 / (1.0 - share)


def summary(loads: Sequence[Tuple[float, int, float]]) -> Optional[Load]:
    """Other processes' use over several runs, ``(others_cpus, host_cpus, wall_s)`` each: their
    CPU seconds over the runs' wall seconds. ``None`` without any."""
    loads = [x for x in loads if x[2] and x[2] > 0]
    if not loads:
        return None
    wall = sum(w for _, _, w in loads)
    return Load(sum(o * w for o, _, w in loads) / wall, max(m for _, m, _ in loads), wall)


def busy_line(load: Optional[Load], what: str = "the run", verdict: bool = True) -> str:
    """``the machine was busy: other processes used 1.30 of 2 CPUs during the run (…)`` or its
    quiet form (busy: at least :data:`BUSY_SHARE` of the CPUs); with ``verdict``, what that does
    to the verdict (widened, or withheld at :data:`WITHHOLD_SHARE`). Says when /proc could not
    be read."""
    if load is None:
        return f"machine load: not measured (no /proc/stat): {what} may have shared the machine"
    state = "busy" if load.share >= BUSY_SHARE else "quiet"
    line = (
        f"the machine was {state}: other processes used {load.others_cpus:.2f} of {load.host_cpus} CPUs during {what}"
    )
    if load.share < BUSY_SHARE:
        return line + f" (under {BUSY_SHARE:.0%} of them)"
    if not verdict:
        return line + f" ({load.share:.0%} of them)"
    if load.share >= WITHHOLD_SHARE:
        return line + f" (at least {WITHHOLD_SHARE:.0%} of them: the verdict is withheld)"
    return line + (
        f" (over {BUSY_SHARE:.0%} of them: each run's interval is widened by what they may have taken, "
        "M / (M - their CPUs))"
    )


def withheld(load: Optional[Load]) -> bool:
    """Whether a verdict must be withheld: other processes used :data:`WITHHOLD_SHARE` of the
    machine's CPUs or more."""
    return load is not None and load.share >= WITHHOLD_SHARE
