"""Multi-rank jobs: one :class:`~watchdog.daemon.Watcher` per training rank (``torchrun``'s
ranks, a launcher's, ``torch.multiprocessing.spawn``'s), and the launcher watched for the report
written after the job ends. Wiring only, like :mod:`watchdog.daemon`; ranks are found by
:func:`watchdog.collect.discovery.find_ranks`."""

from __future__ import annotations

import functools
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import psutil

from .collect import discovery, procfs
from .collect.inside import InsideReader
from .config import Config
from .daemon import Outcome, Watcher, log
from .types import ROLE_LAUNCHER, ROLE_RANK, Sample
from .wake import Waker

# A job's ranks are looked for again when the job's tree changed (a process came, went or was
# renamed, or another process opened a DataLoader iterator, in the job-level watcher's latest
# sample), and at least every this many seconds (each look reads the environment of the
# processes above the ranks and walks the tree with psutil).
_RANK_DISCOVERY_S = 30.0
# With ranks, the job-level watcher (the launcher, for the report after the job ends) samples
# only every this many ticks.
_JOB_SAMPLE_EVERY = 5


def _ended(pid: int, start: Optional[int]) -> bool:
    """Whether the rank ``pid`` that started at ``start`` (clock ticks since boot) has ended (a
    rank watcher's ``job_ended``): one ``/proc/PID/stat`` read (:func:`procfs.running`)."""
    return not procfs.running(pid, start)


class JobWatcher:
    """Watches a job that may run several training ranks (``torchrun``'s elastic agent, a
    launcher script): each process whose environment sets ``RANK`` is watched by a
    :class:`Watcher` of its own, as the main process of its DataLoader workers, and its reports
    name the rank. The launcher itself is sampled for the report written after the job ends,
    never examined: it polls its ranks and would look busy or stuck for reasons of its own.
    Without ranks, one :class:`Watcher` watches the job as before.

    Ending a stuck rank (``on_hang: terminate``) signals that rank's own tree only, never the
    launcher or the process group: the launcher then applies its own policy
    (``torchrun --max-restarts``: restart the ranks, or stop them all and exit non-zero).

    Args: as :class:`Watcher`.
    """

    def __init__(
        self,
        config: Config,
        root_pid: int,
        own_group: Optional[int],
        job_ended: Callable[[], bool],
        wake: Waker,
        stderr_tail: Callable[[], str] = lambda: "",
        job_cmdline: Optional[List[str]] = None,
        inside: Optional[InsideReader] = None,
    ) -> None:
        self.config = config
        self.root_pid = root_pid
        self.job_ended = job_ended
        self.wake = wake
        self.stop = threading.Event()
        self._stderr_tail = stderr_tail
        self._inside = inside
        self.job = Watcher(config, root_pid, own_group, job_ended, wake, stderr_tail, job_cmdline, inside)
        self.alerts = self.job.alerts
        self.on_report: Callable[[str, str, str], None] = lambda mode, kind, rank: None
        self.job.on_report = lambda *a: self.on_report(*a)
        self.ranks: Dict[Tuple[int, float], Watcher] = {}
        self._all: List[Watcher] = [self.job]
        self._next_discovery = float("-inf")
        self._tree: Optional[tuple] = None  # what the last look saw (:meth:`_tree_now`)
        self._ticks = 0

    @property
    def outcome(self) -> Outcome:
        """Reports of every watcher so far, and whether any of them ended the job or a rank."""
        return Outcome([r for w in self._all for r in w.outcome.reports], any(w.outcome.terminated for w in self._all))

    def _tree_now(self) -> Optional[tuple]:
        """What the ranks found depend on, from the job-level watcher's latest sample: each
        process's ``(pid, create_time, name, ppid)`` and the pids that own a DataLoader iterator
        (the inside view). ``None`` before the first sample."""
        if not self.job.timeline:
            return None
        last = self.job.timeline[-1]
        return (
            tuple((p.pid, p.create_time, p.name, p.ppid) for p in last.processes),
            tuple(sorted({v.pid for v in last.loaders})),
        )

    def _discover(self) -> None:
        now = time.monotonic()
        tree = self._tree_now()
        if tree is not None and tree == self._tree and now < self._next_discovery:
            return  # nothing the ranks depend on changed since the last look
        self._tree = tree
        self._next_discovery = now + _RANK_DISCOVERY_S
        owners = set(tree[1]) if tree is not None else set()
        try:
            found = discovery.find_ranks(psutil.Process(self.root_pid), owners)
        except psutil.Error:
            return
        for proc, env in found:
            try:
                key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            if key in self.ranks:
                continue
            w = Watcher(
                self.config,
                proc.pid,
                None,
                functools.partial(_ended, proc.pid, procfs.start_ticks(proc.pid)),
                self.wake,
                self._stderr_tail,
                None,
                self._inside,
                rank=env,
                peers=functools.partial(self.loader_stalls, except_key=key),
                peer_loaders=functools.partial(self.loaders_of_ranks, except_key=key),
                alerts=self.alerts,
            )
            w.on_report = lambda *a: self.on_report(*a)
            self.ranks[key] = w
            self._all.append(w)
            world = f" of {env['WORLD_SIZE']}" if env.get("WORLD_SIZE") else ""
            log(f"watching rank {env.get('RANK')}{world} (pid {proc.pid}) and its DataLoader workers")
        for key in [k for k, w in self.ranks.items() if w.job_ended()]:
            del self.ranks[key]  # its reports stay in the outcome
        self.job.examine = not self.ranks
        self.job.sampler.role_overrides = self._roles(found)

    def _roles(self, found) -> Dict[int, str]:
        """Roles for the launcher's own sample: ``launcher`` for the job's main when its ranks
        are other processes, ``rank`` for each rank."""
        if not self.ranks:
            return {}
        roles = {proc.pid: ROLE_RANK for proc, _env in found}
        try:
            main = discovery.find_main(psutil.Process(self.root_pid))
        except psutil.Error:
            main = None
        if main is not None and main.pid not in roles:
            roles[main.pid] = ROLE_LAUNCHER
        return roles

    def loader_stalls(self, except_key: Optional[Tuple[int, float]] = None) -> List[str]:
        """One line per rank (other than ``except_key``) that explains why the others wait: its
        main has waited in ``__next__`` for a batch a worker owns (the inside view) for at least
        half of ``stall_timeout_s``, or its last report was a DataLoader hang or uneven batches
        across ranks."""
        out = []
        now = time.monotonic()
        for key, w in self.ranks.items():
            if key == except_key or not w.timeline:
                continue
            last = w.timeline[-1]
            name = f"rank {(w.rank or {}).get('RANK')} (pid {w.root_pid})"
            for v in last.loaders:
                if (
                    v.pid == w.root_pid
                    and v.waiting_since is not None
                    and v.waiting_worker >= 0
                    and now - v.waiting_since >= self.config.stall_timeout_s / 2
                ):
                    pid = v.workers[v.waiting_worker] if v.waiting_worker < len(v.workers) else None
                    out.append(
                        f"{name} has waited {now - v.waiting_since:.0f} s in its DataLoader for batch {v.waiting_idx} "
                        f"from worker {v.waiting_worker}" + (f" (pid {pid})" if pid else "")
                    )
                    break
            else:
                if w.last_hang_kind_in_loader:
                    out.append(f"{name}: its DataLoader hang was reported ({w.last_hang_kind_in_loader})")
                elif w.last_hang_kind == "uneven_batches":
                    out.append(f"{name}: uneven batches across ranks were reported")
        return out

    def metrics_view(self) -> List[Tuple[str, Optional[Sample], Optional[float]]]:
        """``[(rank, latest sample, seconds since progress)]`` for :class:`~watchdog.metrics.JobMetrics`:
        each rank's, or the job's when it has no ranks. Read from another thread: only the
        last values each watcher stored."""
        watchers = list(self.ranks.values()) or [self.job]
        return [
            (str((w.rank or {}).get("RANK", "")), w.timeline[-1] if w.timeline else None, w.last_stall_s)
            for w in watchers
        ]

    def loaders_of_ranks(self, except_key: Optional[Tuple[int, float]] = None) -> tuple:
        """``((rank, loaders of its main), …)`` for every rank but ``except_key``, from its
        latest sample (:attr:`Facts.peer_loaders`)."""
        out = []
        for key, w in self.ranks.items():
            if key == except_key or not w.timeline:
                continue
            out.append(
                (str((w.rank or {}).get("RANK")), tuple(v for v in w.timeline[-1].loaders if v.pid == w.root_pid))
            )
        return tuple(out)

    def run(self) -> Outcome:
        """Watch until the job ends or ``stop`` is set; a single-process job also stops once it
        is terminated."""
        if self.job.pyspy is None:
            log("py-spy not found (pip install py-spy, or set py_spy.path): reports will hold /proc facts only")
        while not self.stop.is_set() and not self.job_ended():
            try:
                self._discover()
            except Exception:
                self.job._internal_error("looking for ranks")
            if not self.ranks or self._ticks % _JOB_SAMPLE_EVERY == 0:
                self.job.step()
            self._ticks += 1
            for w in list(self.ranks.values()):
                if not w.job_ended():
                    w.step()
            if self.job.outcome.terminated:
                break
            self.wake.wait(self.config.interval_s)
            self.wake.clear()
        return self.outcome

    def after_exit(self, exit_code: Optional[int], terminated: bool = False, signalled: Optional[int] = None) -> None:
        """The job-level look after the job ended (:meth:`Watcher.after_exit`); then waits up to
        ``exec_timeout_s`` for alert commands still running."""
        self.job.after_exit(exit_code, terminated, signalled)
        self.alerts.wait(self.config.exec_timeout_s)
