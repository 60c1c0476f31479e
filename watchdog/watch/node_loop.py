"""Multi-rank jobs: one :class:`~watchdog.watch.watcher.Watcher` per training rank (``torchrun``'s
ranks, a launcher's, ``torch.multiprocessing.spawn``'s), and the launcher watched for the report
written after the job ends. Wiring only, like :mod:`watchdog.watch.watcher`; ranks are found by
:func:`watchdog.collect.discovery.find_ranks`."""

from __future__ import annotations

import functools
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

import psutil

from ..collect import discovery, examine, procfs
from ..collect.memory_plan import MemoryReadBudget
from ..collect.node import NodeReads
from ..collect.sampler import NodeShare
from ..config import Config
from ..types import (
    MODE_HANG,
    ROLE_LAUNCHER,
    ROLE_RANK,
    ProcessRole,
    ProcessSample,
    ProcId,
    RankId,
    ReportWritten,
    WatcherStatus,
)
from .job import Outcome, WatchedJob, log
from .wake import Waker
from .watcher import Watcher

# A job's ranks are looked for again when the job's tree changed (a process came, went, was
# renamed or ran another program: a launcher's child forked before it exec'd the rank's program
# has the launcher's name and no RANK yet; or another process opened a DataLoader iterator, in
# the job-level watcher's latest sample), and at least every this many seconds (each look reads the environment of the
# processes above the ranks and walks the tree with psutil).
_RANK_DISCOVERY_S = 30.0
# With ranks, the job-level watcher (the launcher, for the report after the job ends) samples
# only every this many ticks.
_JOB_SAMPLE_EVERY = 5
# The job-level sample takes a rank's processes from the rank's own latest sample when that is at
# most this many intervals old (NodeLoop._borrow): while batches flow a rank skips at most two
# ticks in a row (NOTE [ Lean ticks ] in watchdog/collect/read_plan.py), so its latest is up to 3 old.
_BORROW_AGE_TICKS = 4
# Seconds the job's loop waits for the ranks' ticks of one round (_RankStepper) before it goes
# on without the rank whose tick has not returned (a read of /proc blocked in the kernel).
_STEP_WAIT_S = 10.0


class _RankStepper:
    """Steps a list of ranks' watchers back to back in a thread of its own, one round per
    :meth:`round` (NOTE [ One loop for the node ]). The job's loop waits for each round at most
    a while: a read of ``/proc`` that blocks in the kernel (``cmdline``, ``maps`` and
    ``smaps_rollup`` take the process's mmap lock, which a task stuck in a page fault on a hung
    file system can hold) stops this thread, never the loop. Once :attr:`abandoned`, the thread
    ends after the tick it is in (:attr:`current`, ``None`` between ticks)."""

    def __init__(self) -> None:
        self._go = threading.Event()
        self._done = threading.Event()
        self._batch: List[Watcher] = []
        self.current: Optional[Watcher] = None
        self.abandoned = False
        self._thread = threading.Thread(target=self._run, name="ranks", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether its thread still runs."""
        return self._thread.is_alive()

    def round(self, watchers: List[Watcher], timeout_s: float) -> bool:
        """Step each of ``watchers`` once, in order; returns whether the round ended within
        ``timeout_s`` seconds (``False``: :attr:`current` has not returned)."""
        self._batch = watchers
        self._done.clear()
        self._go.set()
        return self._done.wait(timeout_s)

    def _run(self) -> None:
        while not self.abandoned:
            self._go.wait()
            self._go.clear()
            for w in self._batch:
                if self.abandoned:
                    break
                self.current = w
                try:
                    w.step()
                except Exception:  # step never raises; this thread must not end if it ever did
                    w.internal_error("watching a rank")
                self.current = None
            self._done.set()


def describe_rank(rank: RankId, pid: int) -> str:
    """How the log names ``rank`` (found by :func:`discovery.find_ranks`), watched as main
    ``pid``: ``rank 1 of 2 (pid 42)``, with where its number came from when no torchrun-style
    ``RANK`` gave it (``from SLURM_PROCID …``); a helper process (not a rank) as such."""
    env = rank.as_dict()
    source = env.get("RANK_SOURCE", "")
    if source == discovery.SOURCE_HELPER:
        return f"process {pid} ({source})"
    world = f" of {env['WORLD_SIZE']}" if env.get("WORLD_SIZE") else ""
    return f"rank {env.get('RANK')}{world} (pid {pid}" + (f"; from {source})" if source else ")")


def _ended_check(rank: ProcId) -> Callable[[], bool]:
    """A rank watcher's ``job_ended``: whether ``rank`` has ended, one ``poll`` of a pidfd per
    call (:class:`procfs.ExitWatch`; asked at every tick of every rank)."""
    return procfs.ExitWatch(rank.pid, rank.start_ticks).ended


class NodeLoop:
    """Watches a job that may run several training ranks (``torchrun``'s elastic agent, a
    launcher script): each process whose environment sets ``RANK`` is watched by a
    :class:`Watcher` of its own, as the main process of its DataLoader workers, and its reports
    name the rank. The launcher itself is sampled for the report written after the job ends,
    never examined: it polls its ranks and would look busy or stuck for reasons of its own.
    Without ranks, one :class:`Watcher` watches the job as before.

    Ending a stuck rank (``on_hang: terminate``) signals that rank's own tree only, never the
    launcher or the process group: the launcher then applies its own policy
    (``torchrun --max-restarts``: restart the ranks, or stop them all and exit non-zero).

    NOTE [ One loop for the node ]: one loop (:meth:`run`, the caller's thread) steps the
    job-level watcher, then has every rank's watcher stepped, one after the other, in one
    thread (:class:`_RankStepper`), each tick. A rank's examination (py-spy dumps, up to
    ``py_spy.timeout_s`` and more) runs in a thread of its own (``examine_apart``), and that
    rank is not stepped until it is over, so that it never holds up the other ranks' ticks; a
    tick blocked in the kernel (a read of ``/proc`` of a process in D state) holds up only its
    stepper, which the loop leaves to it after ``_STEP_WAIT_S``. The ticks of 8 ranks back to
    back cost about two thirds of what 8 threads ticking each on its own did (measured side by
    side on ``dlwatch probe overhead``'s node job: the same code runs while its data is still
    in the CPU's caches, and the interpreter switches no thread between them). The watchers
    read each other only through :meth:`Watcher.status`.

    Args:
        config: validated settings.
        job: the job's parameters (:class:`~watchdog.watch.job.WatchedJob`).
        wake: what the loop sleeps on between ticks (a signal to dlwatch wakes it).
    """

    def __init__(self, config: Config, job: WatchedJob, wake: Waker) -> None:
        self.config = config
        self.watched = job
        self.wake = wake
        # the node's readings, one for every rank's sampler and the job's (NOTE [ Node reads ])
        node = NodeReads(max_age_s=config.interval_s / 2)
        # the ranks' samplers read memory within one budget together
        self._rank_share = NodeShare(node, MemoryReadBudget())
        self.job = Watcher(config, job, share=NodeShare(node, None, self._borrow, self._borrowed_view))
        self.alerts = self.job.alerts
        self.on_report: Callable[[ReportWritten], None] = lambda written: None
        self.job.on_report = lambda *a: self.on_report(*a)
        self.ranks: Dict[ProcId, Watcher] = {}
        self._all: List[Watcher] = [self.job]
        self._stepper: Optional[_RankStepper] = None  # steps the ranks (NOTE [ One loop for the node ])
        self._abandoned: List[_RankStepper] = []  # steppers left to a tick that did not return
        self._next_discovery = float("-inf")
        self._tree: Optional[tuple] = None  # what the last look saw (:meth:`_tree_now`)
        self._tree_sample: Optional[object] = None  # the job-level sample it was made from
        self._ticks = 0

    @property
    def outcome(self) -> Outcome:
        """Reports of every watcher so far, whether any of them ended the job or a rank, and why
        watching stopped before the job ended (the job watcher's ``stopped``)."""
        return Outcome(
            [r for w in self._all for r in w.outcome.reports],
            any(w.outcome.terminated for w in self._all),
            self.job.outcome.stopped,
            [r for w in self._all for r in w.outcome.resolved],
        )

    def _borrow(self, key: ProcId) -> Optional[Tuple[ProcessSample, ...]]:
        """The processes of the rank ``key`` (its main first, then its workers) from its own
        watcher's latest sample when that is at most ``_BORROW_AGE_TICKS`` intervals old, for
        the job-level sample (which then reads nothing of that rank again: every process
        of the node read once a tick, not twice); ``None`` (the job-level sampler walks it):
        not a rank, or its watcher has no recent sample of it."""
        w = self.ranks.get(key)
        if w is None:
            return None
        last = w.status().sample
        if (
            last is None
            or last.main is None
            or last.main.ident != key
            or time.monotonic() - last.t_mono > _BORROW_AGE_TICKS * self.config.interval_s
        ):
            return None
        return last.processes

    def _borrowed_view(self, pids: Set[int]) -> Tuple[tuple, tuple]:
        """``(loaders, fetches)`` of the processes ``pids`` that the job-level sample borrowed
        (:meth:`_borrow`), from their ranks' latest samples: the inside view the ranks read
        already is not read again for the job."""
        loaders: list = []
        fetches: list = []
        for w in list(self.ranks.values()):
            last = w.status().sample
            if last is None or last.main is None or last.main.pid not in pids:
                continue
            loaders.extend(v for v in last.loaders if v.pid in pids)
            fetches.extend(f for f in last.fetches if f.pid in pids)
        return tuple(loaders), tuple(fetches)

    def _tree_now(self) -> Optional[tuple]:
        """What the ranks found depend on, from the job-level watcher's latest sample: each
        process's ``(ProcId, name, ppid, command line)`` and the pids that own a DataLoader
        iterator (the inside view). ``None`` before the first sample."""
        last = self.job.status().sample
        if last is None:
            return None
        return (
            tuple((p.ident, p.name, p.ppid, p.cmdline) for p in last.processes),
            tuple(sorted({v.pid for v in last.loaders})),
        )

    def _discover(self) -> None:
        now = time.monotonic()
        last = self.job.status().sample
        if last is not None and last is self._tree_sample and now < self._next_discovery:
            return  # the job-level watcher took no sample since the last look (it samples every few ticks)
        self._tree_sample = last
        tree = self._tree_now()
        if tree is not None and tree == self._tree and now < self._next_discovery:
            return  # nothing the ranks depend on changed since the last look
        self._tree = tree
        self._next_discovery = now + _RANK_DISCOVERY_S
        owners = set(tree[1]) if tree is not None else set()
        try:
            found = discovery.find_ranks(psutil.Process(self.watched.root_pid), owners)
        except psutil.Error:
            return
        for proc, env in found:
            start = procfs.start_ticks(proc.pid)
            if start is None:
                continue
            key = ProcId(proc.pid, start)
            if key in self.ranks:
                continue
            rank = RankId.of(env)
            w = Watcher(
                self.config,
                self.watched.rank(proc.pid, _ended_check(key)),
                rank,
                peers=functools.partial(self.loader_stalls, except_key=key),
                peer_loaders=functools.partial(self.loaders_of_ranks, except_key=key),
                alerts=self.alerts,
                examine_apart=True,
                share=self._rank_share,
            )
            w.on_report = functools.partial(self._rank_reported, key)
            self.ranks[key] = w
            self._all.append(w)
            log(f"watching {describe_rank(rank, proc.pid)} and its DataLoader workers")
        for key in [k for k, w in self.ranks.items() if w.job.job_ended() and not w.examining]:
            del self.ranks[key]  # its reports stay in the outcome
        self.job.sampler.set_roles(self._roles(found))
        self.job.examine = not self.ranks

    def _rank_reported(self, key: ProcId, written: ReportWritten) -> None:
        """A rank's report was written (called from its examination's thread, or the loop's for
        a warning): count it, and when it was a hang in its DataLoader, each other rank stalled
        for half of ``stall_timeout_s`` or more says now that it waits for that one (ending the
        stuck rank may end the job before their own examinations come due)."""
        self.on_report(written)
        if written.mode != MODE_HANG:
            return
        stuck = self.ranks.get(key)
        if stuck is None or not stuck.status().hang_in_loader:
            return
        status = stuck.status()
        peer = f"rank {status.rank} (pid {status.root_pid}): its DataLoader hang was reported ({status.last_hang_kind})"
        for other_key, w in list(self.ranks.items()):
            stall_s = w.status().stall_s
            if other_key != key and stall_s is not None and stall_s >= self.config.stall_timeout_s / 2:
                w.hangs.waits_for_peer(peer, stall_s)

    def _step_ranks(self) -> None:
        """One tick of every rank's watcher, back to back in the stepper's thread (NOTE [ One
        loop for the node ]), but for a rank whose examination still runs, that ended, that was
        ended, or whose last tick has not returned. A round that does not end within
        ``_STEP_WAIT_S`` leaves its stepper to the tick it is blocked in: the next round has a
        stepper of its own, and the blocked rank is stepped again once its tick returns."""
        self._abandoned = [st for st in self._abandoned if st.alive]
        blocked = {id(st.current) for st in self._abandoned if st.current is not None}
        due = [
            w
            for w in self.ranks.values()
            if id(w) not in blocked and not (w.examining or w.outcome.terminated or w.job.job_ended())
        ]
        if not due:
            return
        if self._stepper is None:
            self._stepper = _RankStepper()
        if not self._stepper.round(due, _STEP_WAIT_S):
            stuck = self._stepper.current
            self._stepper.abandoned = True
            self._abandoned.append(self._stepper)
            self._stepper = None
            if stuck is not None:
                status = stuck.status()
                log(
                    f"rank {status.rank} (pid {status.root_pid}): its tick has not returned for {_STEP_WAIT_S:g} s "
                    "(a read of /proc blocked in the kernel: a process in D state?); the other ranks are watched "
                    "meanwhile, and it is again once its tick returns"
                )

    def _roles(self, found) -> Dict[int, ProcessRole]:
        """Roles for the launcher's own sample: ``launcher`` for the job's main when its ranks
        are other processes, ``rank`` for each rank."""
        if not self.ranks:
            return {}
        roles = {proc.pid: ROLE_RANK for proc, _env in found}
        try:
            main = discovery.find_main(psutil.Process(self.watched.root_pid))
        except psutil.Error:
            main = None
        if main is not None and main.pid not in roles:
            roles[main.pid] = ROLE_LAUNCHER
        return roles

    def loader_stalls(self, except_key: Optional[ProcId] = None) -> List[str]:
        """One line per rank (other than ``except_key``) that explains why the others wait: its
        main has waited in ``__next__`` for a batch a worker owns (the inside view) for at least
        half of ``stall_timeout_s``, or its last report was a DataLoader hang or uneven batches
        across ranks."""
        out = []
        now = time.monotonic()
        for key, w in list(self.ranks.items()):
            status = w.status()
            last = status.sample
            if key == except_key or last is None:
                continue
            name = f"rank {status.rank} (pid {status.root_pid})"
            for v in last.loaders:
                if (
                    v.pid == status.root_pid
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
                if status.last_hang_kind and status.hang_in_loader:
                    out.append(f"{name}: its DataLoader hang was reported ({status.last_hang_kind})")
                elif status.last_hang_kind == "uneven_batches":
                    out.append(f"{name}: uneven batches across ranks were reported")
        return out

    def metrics_view(self) -> List[WatcherStatus]:
        """What each rank's watcher last saw (the job's, when it has no ranks), for
        :class:`~watchdog.watch.metrics.JobMetrics`. Read from another thread: only the last values
        each watcher stored."""
        watchers = list(self.ranks.values()) or [self.job]
        return [w.status() for w in watchers]

    def loaders_of_ranks(self, except_key: Optional[ProcId] = None) -> tuple:
        """``((rank, loaders of its main), …)`` for every rank but ``except_key``, from its
        latest sample (:attr:`Facts.peer_loaders`)."""
        out = []
        for key, w in list(self.ranks.items()):
            status = w.status()
            if key == except_key or status.sample is None:
                continue
            out.append((status.rank, tuple(v for v in status.sample.loaders if v.pid == status.root_pid)))
        return tuple(out)

    def run(self, until: Callable[[], Optional[str]] = lambda: None) -> Outcome:
        """Watch until the job ends; a single-process job also stops once it is terminated,
        and any job once ``until()`` gives a reason (``outcome.stopped``; checked after each
        tick: a bounded run, :class:`~watchdog.commands.verify_runs.RunBound`). The ranks' examinations still
        running are waited for (together at most one examination and its termination grace)
        before this returns."""
        if self.job.pyspy is None:
            log("py-spy not found (pip install py-spy, or set py_spy.path): reports will hold /proc facts only")
        try:
            while not self.watched.job_ended():
                try:
                    self._discover()
                except Exception:
                    self.job.internal_error("looking for ranks")
                if not self.ranks or self._ticks % _JOB_SAMPLE_EVERY == 0:
                    self.job.step()
                self._step_ranks()
                self._ticks += 1
                if self.job.outcome.terminated:
                    break
                stopped = until()
                if stopped:
                    self.job.outcome.stopped = stopped
                    break
                self.wake.wait(self.config.interval_s)
                self.wake.clear()
        finally:
            self._stop_ranks()
        return self.outcome

    def _stop_ranks(self) -> None:
        cfg = self.config
        if self._stepper is not None:
            self._stepper.abandoned = True  # it ends at its next round, or now if it waits for one
            self._stepper.round([], 0.0)
        bound = time.monotonic() + 2 * cfg.py_spy.timeout_s + examine.OUTSIDE_DUMPS_S + cfg.terminate_grace_s
        for w in self._all:
            w.join_examination(bound - time.monotonic())

    def after_exit(
        self,
        exit_code: Optional[int],
        terminated: bool = False,
        signalled: Optional[int] = None,
        interrupted: Callable[[], bool] = lambda: False,
    ) -> None:
        """The job-level look after the job ended (:meth:`Watcher.after_exit`), and the outcome
        of each rank's hang reports still open (``outcome.json``: ``job_ended`` with the job's
        exit code, or ``resolved`` when its loader had moved again since); then waits up to
        ``alerts.exec_timeout_s`` for alert commands still running, or until ``interrupted()`` (a
        signal to dlwatch meanwhile)."""
        self.job.after_exit(exit_code, terminated, signalled)
        for w in self._all[1:]:  # the ranks' hang reports still open when the job ended (outcome.json)
            try:
                w.hangs.job_ended(exit_code, signalled)
            except Exception:
                w.internal_error("recording a rank's hang outcome")
            w.outcome.resolved = w.hangs.resolved_reports
        self.alerts.wait(self.config.alerts.exec_timeout_s, interrupted)
