"""The hang episodes of one watched main, from a due stall to what became of its report: the
examination (:func:`watchdog.collect.examine.look`), the decision (:class:`watchdog.detect.Episode`,
pure), the closer look and report (:mod:`watchdog.watch.hang_look`, :class:`watchdog.watch.publish.Publisher`),
ending the job when configured and proven (:func:`watchdog.watch.act.terminate_tree`), and the
``outcome.json`` of each hang report (resolved, terminated, or open when the job ended).

NOTE [ Escalation ladder ] below says when each step runs. The watch loop
(:class:`watchdog.watch.watcher.Watcher`) calls :meth:`HangEpisodes.moved` at each stalled tick,
:meth:`HangEpisodes.due` to know whether to look, :meth:`HangEpisodes.examine` when it is,
and :meth:`HangEpisodes.job_ended` once the job is gone.

NOTE [ Escalation ladder ]
1. Every ``interval_s``: cheap psutil and ``/proc`` reads (no ptrace), including each loader
   thread's kernel wait (``/proc/PID/task/TID/syscall``), as the tick's read plan asks
   (:mod:`watchdog.collect.read_plan`: NOTE [ Lean ticks ], NOTE [ Thread reads ]).
2. When a trigger comes due (NOTE [ Hang criterion ] in detect/progress.py): every thread's wait is read
   twice, 0.25 s apart; Python-only py-spy dumps of main and the workers; the holders of pipes
   that threads wait on. :func:`detect.assess` then proves the hang (NOTE [ Deadlock proof ]),
   reports it as suspected, or dismisses it (the stall clock restarts).
3. A hang: py-spy dumps main and every worker in parallel (native frames when configured), and
   the report is written.
4. With ``on_hang: terminate`` the job's own processes (its tree, and its process group under
   ``dlwatch run``) get SIGTERM, then SIGKILL after ``terminate_grace_s``, only when the hang is
   proven (NOTE [ Deadlock proof ] in detect/proof.py); outside the loader only when
   ``terminate_outside_loader`` is true or main itself is proven stuck. A suspected hang is
   reported and left alone, however long it lasts (``busy_stall_timeout_s`` only examines and
   reports). The opt-in ``terminate_unproven_after_s`` also ends an unproven loader stall
   without a batch for that long, but never while a process of the job moves or a worker
   computes (``detect.still_moving``). The same
   unchanged hang is not reported twice, except once more when a proof or the busy-stall
   ceiling comes due after a suspected report; a suspected hang that resolves by itself is said
   to, and one at the same place is reported again only once it lasts twice as long as the
   longest that resolved (``detect.Episode``: one episode, one report).

Under the batch and main-wait measures (NOTE [ Hang criterion ]) step 3 begins with a second
Python-only dump of the workers 2 s after the first, to name a line a worker polls at; it also
reads ``/proc/locks`` and follows each blocked worker's wait chain (``collect.chain``).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from .. import detect
from ..collect import examine
from ..collect.sampler import Sampler
from ..config import Config
from ..diagnose import diagnose
from ..errors import ReportWriteError
from ..report import document as report
from ..report import writer
from ..types import Evidence, RankId, Sample, Stall
from . import act
from .exit_look import JobTraces
from .hang_look import closer_look, hang_facts
from .job import WatchedJob

# A stall dismissed for the same reason (numbers aside) is said again after this many seconds.
DISMISSAL_REPEAT_S = 3600.0
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class JobHandles:
    """What the hang episodes read of the job and act on, handed over by the watch loop.

    ``sampler`` re-samples the job (after py-spy's stops, and for the pids to end);
    ``tracker`` is the loop's progress tracker, re-baselined after each look; ``births`` the
    main threads seen at each worker's fork; ``traces`` what is kept for the job's end (its OOM
    kills); ``timeline()`` the
    loop's recent samples, oldest first; ``pyspy`` the py-spy binary's path (``None``: none).
    ``job`` the job's parameters (its process group to signal on terminate, ``job_ended()``,
    ``stderr_tail()``); ``rank`` who the rank is under a multi-rank launcher (``None``: none),
    ``peers()`` the other ranks' loader stalls, one line each, ``peer_loaders()`` their main
    iterators; ``publish(facts, diagnoses, action,
    suffix, note=…)`` writes one report and returns its folder or ``None``;
    ``say_once(key, text, every_s=…)`` logs a line at most once per ``every_s`` seconds."""

    sampler: Sampler
    tracker: detect.ProgressTracker
    births: detect.WorkerBirths
    traces: JobTraces
    timeline: Callable[[], tuple]
    pyspy: Optional[str]
    job: WatchedJob
    rank: Optional[RankId]
    peers: Callable[[], List[str]]
    peer_loaders: Callable[[], tuple]
    publish: Callable[..., Optional[str]]
    say_once: Callable[..., None]
    log: Callable[[str], None]
    host_cpus: int


class ApartExamination:
    """One examination at a time in a thread of its own (a rank's, NOTE [ One loop for the
    node ] in watch/node_loop.py): ``due`` is set by the tick that found a stall due, and
    :meth:`start_due` starts ``examine(sample, stall)`` once that tick is over."""

    def __init__(self, examine: Callable[[Sample, Stall], None], name: str) -> None:
        self._examine = examine
        self._name = name
        self.due: Optional[Tuple[Sample, Stall]] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def running(self) -> bool:
        """Whether the last examination started still runs."""
        return self._thread is not None and self._thread.is_alive()

    def start_due(self) -> None:
        """Start the due examination, if any; without a thread to be had (RLIMIT_NPROC), run it
        here: late rather than never."""
        if self.due is None:
            return
        sample, stall = self.due
        self.due = None
        thread = threading.Thread(target=self._examine, args=(sample, stall), name=self._name, daemon=True)
        try:
            thread.start()
            self._thread = thread
        except RuntimeError:
            self._examine(sample, stall)

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the running examination; whether none runs now."""
        if self._thread is not None:
            self._thread.join(max(0.0, timeout_s))
        return not self.running


class HangEpisodes:
    """One episode, one report: examine a due stall, report it when it is a hang, end the job
    when ``on_hang: terminate`` and the hang is proven (or, with the opt-in
    ``terminate_unproven_after_s``, unproven and nothing of the job moves:
    :func:`detect.termination`), and record each report's outcome.

    ``config`` is the validated settings; ``job`` the :class:`JobHandles` of the watched main.
    After :meth:`examine`, ``terminated`` says whether dlwatch ended the job, and
    ``last_kind``/``in_loader`` describe the last hang reported (its first diagnosis, and
    whether main waited in its DataLoader)."""

    def __init__(self, config: Config, job: JobHandles) -> None:
        self.config = config
        self.job = job
        self.episode = detect.Episode(
            config.stall_timeout_s,
            config.busy_stall_timeout_s,
            config.on_hang == "terminate",
            config.terminate_outside_loader,
            config.terminate_unproven_after_s,
        )
        self.terminated = False
        self.last_kind = ""
        self.in_loader = False
        self.open: List[str] = []  # folders of hang reports whose outcome is not written yet
        # folders of hang reports that resolved by themselves (outcome "resolved"): no failure
        # of the job (``attach`` exits 0 when every report is one, exits.Exit.OK)
        self.resolved_reports: List[str] = []
        # the last dismissal announced: (its reason with numbers left out, when; monotonic s)
        self._dismissal_said: Optional[Tuple[str, float]] = None
        self.resolved: Optional[Tuple[detect.Reported, float]] = None  # a suspected hang that resolved, when

    def moved(self, sample: Sample) -> None:
        """At a stalled tick: say a suspected hang that resolved at an earlier tick (one tick
        late: a job that is ending moves too, and is no news), then fold in the tracker's
        delivery mark (:meth:`detect.Episode.delivered`)."""
        if self.resolved is not None:
            over, at = self.resolved
            self.resolved = None
            kind, where = over.key
            self.job.log(
                f"the suspected hang reported earlier ({kind}{' at ' + where if where else ''}) resolved after "
                f"{at - over.since:.0f} s: the loader moved again (slow, not hung)"
            )
            self._write_outcome(
                "resolved",
                f"resolved after {at - over.since:.0f} s: the loader moved again",
                resolved_after_s=round(at - over.since, 1),
            )
        tracker = self.job.tracker
        ended = self.episode.delivered(
            tracker.last_delivery_mono, sample.t_mono, tracker.last_batch_mono, tracker.members
        )
        if ended is not None:  # a batch moved since a suspected report: said at the next tick
            self.resolved = (ended, sample.t_mono)

    def due(self, stall: Stall, now: float, rule: Optional[detect.Rhythm]) -> Optional[detect.Trigger]:
        """The trigger of an examination due now (:meth:`detect.Episode.due`), or ``None``."""
        return self.episode.due(stall, now, rule)

    def not_judged(self, now: float) -> None:
        """A due stall that is not examined (no DataLoader yet): the stall clock restarts."""
        self.episode.dismissed(now)

    def examine(self, sample: Sample, stall: Stall) -> None:
        """Decide whether a due stall is a hang (:meth:`detect.Episode.conclude` on the
        evidence of :func:`examine.look`); report it if so (:meth:`_report`).

        Every py-spy run for it is over ``py_spy.timeout_s`` seconds after this call began
        (one deadline; the Python-only look gets at most half of it), or, when the batch
        measure's polling look ran, half of it after that look."""
        cfg, job = self.config, self.job
        deadline = time.monotonic() + cfg.py_spy.timeout_s
        woke = job.tracker.woke_during_stall(sample)  # before py-spy attaches
        evidence = examine.look(sample, job.pyspy, cfg.py_spy.timeout_s, job.sampler.sample)
        peers = job.peers() if job.rank else []
        decision = self.episode.conclude(evidence, sample, stall, woke, time.monotonic(), peers)
        job.tracker.trust_timed_waits(decision.assessment.timed_waits)
        if decision.conclusion is detect.Conclusion.REPORT:
            self._report(sample, stall, evidence, decision, deadline)
            return
        job.tracker.rebaseline(evidence.after)  # py-spy's stops are not the job's progress
        reason = decision.assessment.reason
        if decision.conclusion is detect.Conclusion.LOOK_AGAIN:
            job.say_once(
                "rhythm",
                f"no batch for {stall.stall_s:.0f} s, far past the loader's rhythm; not proven stuck: "
                "looking again, reported at stall_timeout_s if it lasts",
            )
        elif decision.conclusion is detect.Conclusion.DISMISS:
            self._say_dismissed(stall, reason)
        elif decision.conclusion is detect.Conclusion.PEER:
            self.waits_for_peer(decision.peer, stall.stall_s, "outside its DataLoader")
        elif decision.conclusion is detect.Conclusion.REPORTED and self.episode.terminate and decision.termination:
            # A hang already reported, looked at again: say why it is still not ended (once
            # per 10 x stall_timeout_s), e.g. the lock holder it waits for still writes.
            job.say_once(
                "not-ended",
                f"on_hang=terminate: the hang reported, no batch for {stall.no_delivery_s:.0f} s, is not ended: "
                f"{decision.termination.note}",
                every_s=cfg.stall_timeout_s * 10,
            )

    def _say_dismissed(self, stall: Stall, reason: str) -> None:
        """Say that an examined stall is not a hang, once: again only when the reason changes
        (another process, another cause: compared with its numbers left out, which change at
        every look) or, for the same reason, once ``DISMISSAL_REPEAT_S`` passed since it was
        said (one long batch is examined every ``stall_timeout_s``, and was said at each
        look: 27 lines for one batch in issue #34)."""
        shape = _NUMBERS.sub("#", reason)
        now = time.monotonic()
        last = self._dismissal_said
        if last is not None and last[0] == shape and now - last[1] < DISMISSAL_REPEAT_S:
            return
        self._dismissal_said = (shape, now)
        self.job.log(f"stall of {stall.stall_s:.0f} s examined, not a hang: {reason}")

    def waits_for_peer(self, peer: str, stall_s: float, where: str = "") -> None:
        """Say (once per ``10 x stall_timeout_s``) that this rank stalled ``stall_s`` seconds
        because it waits for another rank, ``peer`` (one line of
        :meth:`~watchdog.watch.node_loop.NodeLoop.loader_stalls`)."""
        root = self.job.sampler.root_pid
        self.job.say_once(
            "waits-for-peer",
            f"rank {self.job.rank.number if self.job.rank else ''} (pid {root}) stalled {stall_s:.0f} s"
            + (f" {where}" if where else "")
            + f", waiting for another rank: {peer}; that rank's report has the cause",
            every_s=self.config.stall_timeout_s * 10,
        )

    def job_ended(self, exit_code: Optional[int], signalled: Optional[int]) -> None:
        """Record what became of the hang reports still open when the job ended: resolved
        when the loader had moved again since (at a tick whose resolution is not said yet, or
        at the last tick, which :meth:`moved` did not see), else ``job_ended`` with how it
        ended."""
        tracker = self.job.tracker
        if self.open and self.resolved is None:
            ended = self.episode.delivered(
                tracker.last_delivery_mono, time.monotonic(), tracker.last_batch_mono, tracker.members
            )
            if ended is not None:
                moved_at = max(x for x in (tracker.last_delivery_mono, tracker.last_batch_mono) if x is not None)
                self.resolved = (ended, moved_at)
        if self.open and self.resolved is not None:  # the loader moved again, then the job ended
            over, at = self.resolved
            self._write_outcome(
                "resolved",
                f"resolved after {at - over.since:.0f} s: the loader moved again, then the job ended"
                + (f" with exit code {exit_code}" if exit_code is not None else ""),
                resolved_after_s=round(at - over.since, 1),
                exit_code=exit_code,
            )
        if self.open:
            how = (
                f"after the {signal.Signals(signalled).name} dlwatch forwarded to it"
                if signalled is not None
                else f"with exit code {exit_code}"
                if exit_code is not None
                else "(its exit code unknown: attached)"
            )
            self._write_outcome("job_ended", f"the job ended {how} while the hang was open", exit_code=exit_code)

    def _write_outcome(self, kind: str, summary: str, **extra) -> None:
        """Write what became of the open hang reports (``outcome.json`` in each folder,
        :func:`writer.write_outcome`): ``kind`` (``resolved``, ``terminated``, ``job_ended``),
        a one-line ``summary``, when (UTC), and ``extra`` fields. A folder that cannot be
        written is said once; nothing else changes."""
        doc = {"outcome": kind, "summary": summary, "at": report.utc_iso(time.time()), **extra}
        if kind == "resolved":
            self.resolved_reports.extend(self.open)
        for folder in self.open:
            try:
                writer.write_outcome(folder, doc)
            except ReportWriteError as e:
                self.job.say_once("outcome:" + folder, f"{e}: the report's outcome was not recorded")
        self.open = []

    def _report(self, sample: Sample, stall: Stall, evidence: Evidence, decision: detect.Decision, deadline: float):
        """Take the closer look, diagnose, report (unless it recurs, :meth:`detect.Episode.report`),
        and end the job when ``decision`` says so."""
        cfg, job = self.config, self.job
        assessment = decision.assessment
        view = job.sampler.views.read([p.pid for p in sample.processes])
        closer = closer_look(sample, stall, evidence, assessment.proof, view, job.pyspy, cfg.py_spy, deadline)
        facts = hang_facts(
            sample,
            stall,
            evidence,
            assessment,
            closer,
            view,
            timeline=job.timeline(),
            main_threads_at_fork=job.births.as_tuple(),
            stderr_tail=job.job.stderr_tail(),
            oom_kills=job.traces.oom_kills(),
            host_cpus=job.host_cpus,
            rank=job.rank.number if job.rank else None,
            peer_loaders=job.peer_loaders(),
            pyspy_timeout_s=cfg.py_spy.timeout_s,
        )
        after = job.sampler.sample()
        job.tracker.rebaseline(after)  # py-spy's stops are not the job's progress
        ending_note = decision.termination.note if decision.termination else ""
        note = ending_note if decision.terminate else f"not terminated: {ending_note}" if self.episode.terminate else ""
        diagnoses = diagnose(facts)
        key = (diagnoses[0].kind, diagnoses[0].location or "")
        reported = detect.Reported(
            job.tracker.last_delivery_mono,
            decision.terminable,
            assessment.proof is not None,
            key,
            stall.quiet_since_mono,
            batch=job.tracker.last_batch_mono if stall.measure is detect.Measure.BATCHES else None,
            members=job.tracker.members,
        )
        if not self.episode.report(reported, stall, time.monotonic()):
            job.say_once(
                "recurs:" + key[0] + key[1],
                f"the suspected hang at {key[1] or key[0]} came back after it resolved by itself (its longest stall "
                f"{self.episode.resolved[key]:.0f} s): not reported again unless a stall there lasts "
                f"{detect.RECUR_FACTOR:g} times as long; set stall_timeout_s above it if batches are this slow",
            )
            return
        self.last_kind, self.in_loader = diagnoses[0].kind, assessment.verdict.in_loader
        path = job.publish(facts, diagnoses, "terminate" if decision.terminate else "report", "", note=note)
        if path is not None:
            self.open.append(path)
        if decision.terminate:
            job.log(
                f"on_hang=terminate ({ending_note}): ending the job's processes (grace {cfg.terminate_grace_s:g} s)"
            )
            members = job.sampler.root_identity() + [p.ident for p in (after.processes or sample.processes)]
            watched = job.job
            ended = act.terminate_tree(
                members, cfg.terminate_grace_s, watched.own_group, watched.job_ended, own_session=watched.own_session
            )
            job.log(ended)
            self.terminated = True
            unproven = decision.termination is not None and decision.termination.unproven
            self._write_outcome(
                "terminated",
                f"dlwatch ended the job: {ended}",
                certainty="suspected" if unproven else "proven",
                reason=ending_note,
            )
