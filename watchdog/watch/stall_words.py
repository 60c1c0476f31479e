"""What the watcher says of a stall in words: which rule made it due (:func:`criterion`, for
the report), why a stopped job is not hung (:func:`stopped_text`), and whether a stalled job
has shown a DataLoader to judge yet (:class:`LoaderWitness`)."""

from __future__ import annotations

from typing import Callable, Optional, Tuple

from .. import detect
from ..collect import discovery, procfs
from ..config import Config
from ..types import Measure, Sample


def stopped_text(pids: Tuple[int, ...]) -> str:
    """Why the job's stopped processes are not hung: waiting for terminal input (stopped in the
    background of their terminal, :meth:`~watchdog.collect.procfs.ProcStat.stopped_for_terminal`)
    or paused (SIGSTOP, a debugger)."""
    tty = [pid for pid in pids if (st := procfs.proc_stat(pid)) is not None and st.stopped_for_terminal()]
    paused = [pid for pid in pids if pid not in tty]
    out = []
    if tty:
        out.append(
            f"pid(s) {', '.join(map(str, tty))} stopped waiting for terminal input (SIGTTIN/SIGTTOU: they read or "
            "wrote their terminal from the background): bring the job to the foreground (fg) to answer, or give it "
            "no terminal when it runs unattended (stdin=subprocess.DEVNULL, `unzip -o`, `< /dev/null`)"
        )
    if paused:
        out.append(f"pid(s) {', '.join(map(str, paused))} stopped (state T: SIGSTOP or a debugger): paused")
    return "; ".join(out) + "; not hung, the stall clock waits"


def criterion(
    trigger: detect.Trigger, rule: Optional[detect.Rhythm], measure: Measure, cfg: Config, has_loaders: bool
) -> str:
    """Which stall rule fired, and why, for the report (NOTE [ Batch rhythm ] in detect/progress.py):
    ``trigger`` as :meth:`detect.Episode.due` gave it, ``rule`` the loader's rhythm when one
    was measured, ``measure`` the tracker's measure of progress, ``has_loaders`` whether the
    inside view saw an iterator in the latest sample."""
    if trigger == detect.TRIGGER_RHYTHM and rule is not None:
        return rule.criterion
    if trigger == detect.TRIGGER_BUSY:
        return f"no batch for busy_stall_timeout_s ({cfg.busy_stall_timeout_s:g} s)"
    if trigger == detect.TRIGGER_PROOF:
        return (
            "every thread of a process in an untimed private-futex wait, unchanged, "
            f"for stall_timeout_s ({cfg.stall_timeout_s:g} s)"
        )
    if measure == Measure.BATCHES:
        return (
            f"no batch delivered and no sample reached for by a worker for stall_timeout_s "
            f"({cfg.stall_timeout_s:g} s) while main waits in __next__ (the inside view's measure)"
        )
    if measure == Measure.MAIN_WAIT:
        return (
            f"main's iterating thread waited like the DataLoader's batch poll, reading nothing, for "
            f"stall_timeout_s ({cfg.stall_timeout_s:g} s) (the main-wait measure: no inside view)"
        )
    why = "no inside view" if not has_loaders else "main not waiting on a worker, or too few batches for a rhythm"
    return f"no progress of the loader path for stall_timeout_s ({cfg.stall_timeout_s:g} s) (the fixed timeout: {why})"


class LoaderWitness:
    """Whether the watched job has shown a DataLoader yet, for a job with an inside view
    (``has_inside``): a stall of a script that created no iterator is not judged (dlwatch
    judges DataLoader loops; an idle script is no hung loader)."""

    def __init__(self, has_inside: bool) -> None:
        self._has_inside = has_inside
        self._saw_loader = False  # a DataLoader iterator (inside view) or worker was ever seen
        self._recording = False  # main's recorder wrote its record (the inside view runs in main)

    def note(self, sample: Sample) -> None:
        """Fold in ``sample`` (its inside view's iterators and recorders, its workers)."""
        self._saw_loader = self._saw_loader or bool(sample.loaders) or bool(sample.workers)
        main = sample.main
        if main is not None and sample.inside is not None and main.pid in sample.inside.recording:
            self._recording = True

    def idle_script(self, sample: Sample, say_once: Callable[..., None]) -> bool:
        """Whether the job can have no DataLoader yet: with an inside view and none seen so far,
        main's recorder runs and saw no iterator, or main has not imported torch (no
        ``libtorch`` mapped). A recorder that never started in a main that imported torch (an
        interpreter run with ``-I`` or ``-S``, a job that replaced its environment) proves
        nothing: the stall is judged, and that is said once (``say_once``)."""
        main = sample.main
        if not self._has_inside or self._saw_loader:
            return False
        if self._recording or main is None or discovery.has_loaded_torch(main.pid) is False:
            return True
        say_once(
            "deaf-recorder",
            f"pid {main.pid} imported torch but its inside view recorded nothing (the hook did not load in it): "
            "judged from outside",
            every_s=3600.0,
        )
        return False
