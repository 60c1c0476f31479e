"""The hang episode: one stall from its first examination to its end, what was reported of it,
and whether a new look at it is reported again (:class:`Episode`, :class:`Decision`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Set, Tuple

from .. import frames
from ..types import (
    Evidence,
    Sample,
    Stall,
    TextEnum,
    Trigger,
)
from . import dead_releaser, manager_proof
from .assessment import Assessment, Termination, assess, confirm, termination
from .progress import TRIGGER_BUSY, TRIGGER_PROOF, TRIGGER_RHYTHM, TRIGGER_STALL, Rhythm, due_trigger, loader_members
from .proof import loader_waits, prove, prove_loader_idle, relevant, role_words

# --- the hang episode ---------------------------------------------------------------------------

# A suspected stall that resolved by itself is not reported again at the same place until a
# stall there lasts this many times the longest one that resolved.
RECUR_FACTOR = 2.0


@dataclass(frozen=True)
class Reported:
    """The last hang report of an :class:`Episode`, kept while its hang lasts (no batch since).

    ``delivery`` is the tracker's delivery mark then (``ProgressTracker.last_delivery_mono``),
    ``batch`` its batch mark (``ProgressTracker.last_batch_mono``) when the stall was measured
    in batches, else ``None``, ``members`` the loader's members then (:func:`loader_members`),
    ``terminable`` whether the hang could be ended then (:func:`termination`), ``proven``
    whether the report held a proof, ``key`` the first diagnosis's ``(kind, location)``,
    ``since`` when its stall began and ``published`` False for a recurring suspected stall that
    was looked at and not reported again (monotonic seconds)."""

    delivery: Optional[float]
    terminable: bool
    proven: bool
    key: Tuple[str, str] = ("", "")
    since: float = 0.0
    published: bool = True
    batch: Optional[float] = None
    members: frozenset = frozenset()


class Conclusion(TextEnum):
    """What an examination concluded (:meth:`Episode.conclude`)."""

    REPORT = "report"  # a hang: take the closer look and report it (and end the job when allowed)
    DISMISS = "dismiss"  # not a hang: the stall clock restarts
    LOOK_AGAIN = "look_again"  # past the batch rhythm, not proven: wait for stall_timeout_s
    PEER = "peer"  # stalled outside its loader while another rank's loader is stuck
    REPORTED = "reported"  # the same hang, already reported, and this look changes nothing


@dataclass(frozen=True)
class Decision:
    """An examination's outcome: ``conclusion``, the ``assessment`` it rests on, and for a
    report whether the hang may end the job (``termination``, ``terminate``: ``on_hang`` is
    ``terminate`` and it may). ``peer`` names the stalled rank under ``Conclusion.PEER``."""

    conclusion: Conclusion
    assessment: Assessment
    termination: Optional[Termination] = None
    terminate: bool = False
    peer: str = ""

    @property
    def terminable(self) -> bool:
        """Whether the hang could be ended now (the evidence holds and the settings allow it)."""
        return self.termination is not None and self.termination.grounded and self.termination.allowed


class Episode:
    """The hang-episode policy of one watched main, pure (the clock is passed in): when an
    examination is due, what it concludes, what was already reported, when a stall counts as
    resolved, and whether a new look at the same hang is reported (NOTE [ Escalation ladder ]
    in watch/hang_episodes.py).

    Args:
        stall_timeout_s, busy_stall_timeout_s: the configured timeouts, in seconds.
        terminate: ``on_hang`` is ``terminate``.
        terminate_outside_loader: the setting of that name (:func:`termination`).
        terminate_unproven_after_s: the opt-in of that name, seconds (``None``: off;
            :func:`termination`).
    """

    def __init__(
        self,
        stall_timeout_s: float,
        busy_stall_timeout_s: float,
        terminate: bool,
        terminate_outside_loader: bool = False,
        terminate_unproven_after_s: Optional[float] = None,
    ) -> None:
        self.stall_timeout_s = stall_timeout_s
        self.busy_stall_timeout_s = busy_stall_timeout_s
        self.terminate = terminate
        self.terminate_outside_loader = terminate_outside_loader
        self.terminate_unproven_after_s = terminate_unproven_after_s
        self.reported: Optional[Reported] = None
        self.quiet_floor = float("-inf")  # when an examination last found no hang (or looked again)
        self.rhythm_floor = float("-inf")  # when a batch-rhythm examination last proved nothing
        self.resolved: Dict[Tuple[str, str], float] = {}  # (kind, location) -> longest stall that resolved

    def due(self, stall: Stall, now: float, rule: Optional[Rhythm] = None) -> Optional[Trigger]:
        """The trigger of an examination due now (:func:`due_trigger`), or ``None``; while the
        last report's hang lasts, only a proof, the busy-stall ceiling, or (``terminate`` with
        ``terminate_unproven_after_s`` set and no batch for that long) the stall timeout, that
        could escalate it: end it (``terminate``, once it may be ended) or prove it (``report``,
        when unproven)."""
        trigger = due_trigger(
            stall, self.stall_timeout_s, self.busy_stall_timeout_s, self.quiet_floor, now, rule, self.rhythm_floor
        )
        last = self.reported
        if trigger is None or last is None:
            return trigger
        opt_in = self.terminate_unproven_after_s
        unproven_due = (
            self.terminate and opt_in is not None and trigger == TRIGGER_STALL and stall.no_delivery_s >= opt_in
        )
        if trigger not in (TRIGGER_PROOF, TRIGGER_BUSY) and not unproven_due:
            return None
        escalates = not last.terminable if self.terminate else not last.proven
        return trigger if escalates else None

    def delivered(
        self, delivery: Optional[float], now: float, batch: Optional[float] = None, members: frozenset = frozenset()
    ) -> Optional[Reported]:
        """Fold in the tracker's marks (``delivery``: ``ProgressTracker.last_delivery_mono``,
        ``batch``: ``last_batch_mono``, ``members``: the loader's members now): when the job
        moved since the last report, that report's hang is over. Returns the report when it
        was a suspected one that had been published (the caller says ``resolved after N s``),
        else ``None``.

        A hang reported under the batch measure is over only when a batch or a sample moved
        (``batch`` rose): workers that went away, or main's work once it left ``__next__`` by
        an exception, are no delivery. Otherwise the delivery mark must move while the loader
        did not merely lose workers (the members now a strict subset of those reported: a
        killed worker, or a job that is ending, never delivers a batch)."""
        last = self.reported
        if last is None:
            return None
        if last.batch is not None:
            if batch is None or batch <= last.batch:
                return None
        elif delivery == last.delivery or (last.members and members < last.members):
            return None
        self.reported = None
        if last.proven:
            return None
        self.resolved[last.key] = max(self.resolved.get(last.key, 0.0), now - last.since)
        return last if last.published else None

    def conclude(
        self,
        evidence: Evidence,
        sample: Sample,
        stall: Stall,
        woke: Set[Tuple[int, int]],
        now: float,
        stalled_peers: Sequence[str] = (),
    ) -> Decision:
        """Decide on an examination of ``stall`` (due in ``sample``) from what it read.

        The kernel proof over ``evidence.stable`` (:func:`prove`, kept when it covers main or a
        worker), else a Manager lock whose holder ended (``dead_releaser.prove_manager_lock``)
        or a cycle through a Manager (``manager_proof.prove_manager_cycle``),
        else the loader-level one (:func:`prove_loader_idle`); main's verdict
        (:func:`confirm`); then :func:`assess`, unless the workers changed during the look (an
        epoch ended: the job moved). An early (batch-rhythm) look reports only a proof. A rank
        (``stalled_peers`` given, from :meth:`~watchdog.watch.node_loop.NodeLoop.loader_stalls`)
        stalled outside its loader, unproven, waits for the first of those peers. A hang
        already reported is reported again only when this look could end it or proves it
        first. ``woke`` is :meth:`ProgressTracker.woke_during_stall`; ``now`` monotonic
        seconds. Records the floors of :meth:`due` as it decides."""
        main = sample.main
        assert main is not None, "a stall is only declared with main in the sample"
        stacks = evidence.stacks
        threads = [(pid, t) for pid, st in stacks.items() if st.ok for t in st.threads]
        inert = [(pid, t.tid) for pid, t in threads if frames.is_resource_sharer(t)]
        names = {(pid, t.tid): t.name for pid, t in threads if t.name}
        proof = relevant(
            prove(
                evidence.stable,
                evidence.children,
                evidence.pipes,
                inert,
                names,
                evidence.wakeable,
                evidence.lock_holds,
                loader_waits(sample, stacks),
                role_words(sample),
            ),
            sample,
        )
        verdict = confirm(main.pid, stacks.get(main.pid), evidence.details.get(main.pid, ()), len(sample.workers))
        early = stall.trigger == TRIGGER_RHYTHM
        if proof is None:
            reads = manager_proof.ManagerReads(
                sample,
                stacks,
                evidence.stable,
                loader_waits(sample, stacks),
                evidence.wakeable,
                evidence.manager_peers,
                evidence.manager_listeners,
            )
            # a Manager lock whose holder ended (NOTE [ Manager lock proof ] in manager_proof.py)
            proof = dead_releaser.prove_manager_lock(reads)
            if proof is None:  # a cycle through a Manager among the living (the same NOTE)
                proof = manager_proof.prove_manager_cycle(reads, role_words(sample))
        if proof is None:
            timeout = min(self.stall_timeout_s, stall.stall_s) if early else self.stall_timeout_s
            proof = prove_loader_idle(verdict, sample, stacks, stall, timeout)
        assessment = assess(
            stall.trigger,
            sample,
            stall,
            verdict,
            stacks,
            evidence.stable,
            proof,
            woke,
            self.stall_timeout_s,
            evidence.file_locks,
            evidence.details,
            evidence.non_blocking_gets,
        )
        if loader_members(evidence.after) != loader_members(sample):
            assessment = Assessment(False, verdict, "the job's workers changed during the examination: it moved")
        if early and assessment.hang and assessment.proof is None:
            # NOTE [ Batch rhythm ]: before stall_timeout_s only a proven hang is reported.
            self.rhythm_unproven(now)
            return Decision(Conclusion.LOOK_AGAIN, assessment)
        if not assessment.hang:
            self.dismissed(now)
            return Decision(Conclusion.DISMISS, assessment)
        if stalled_peers and not verdict.in_loader and assessment.proof is None:
            self.dismissed(now)
            return Decision(Conclusion.PEER, assessment, peer=stalled_peers[0])
        ending = termination(
            assessment,
            stall,
            sample,
            self.stall_timeout_s,
            self.terminate_unproven_after_s,
            self.terminate_outside_loader,
            evidence.details,
            evidence.file_locks,
        )
        decision = Decision(Conclusion.REPORT, assessment, ending)
        decision = dataclasses.replace(decision, terminate=self.terminate and decision.terminable)
        if self.already_reported(decision.terminate, assessment.proof is not None):
            # Already reported, and this look would neither end it nor prove it: no second
            # report (nor alert) of the same hang; look again later.
            self.dismissed(now)
            return dataclasses.replace(decision, conclusion=Conclusion.REPORTED)
        return decision

    def dismissed(self, now: float) -> None:
        """An examination found no hang (or looked and decided to look again later)."""
        self.quiet_floor = now

    def rhythm_unproven(self, now: float) -> None:
        """A batch-rhythm examination found nothing proven: it waits for ``stall_timeout_s``."""
        self.rhythm_floor = now

    def already_reported(self, terminate: bool, proven: bool) -> bool:
        """Whether a look at a hang already reported would neither end it (``terminate``) nor
        prove it for the first time: then nothing is reported (nor alerted) again."""
        last = self.reported
        return last is not None and not terminate and (not proven or last.proven)

    def report(self, reported: Reported, stall: Stall, now: float) -> bool:
        """Record a hang report about to be written; returns False when it is a suspected stall
        at a place where one resolved by itself before and this one has not yet lasted
        ``RECUR_FACTOR`` times the longest of those (one episode, one report), so it is not
        published. The busy-stall ceiling is always published."""
        self.quiet_floor = now
        longest = self.resolved.get(reported.key)
        recurs = (
            not reported.proven
            and longest is not None
            and stall.trigger != TRIGGER_BUSY
            and stall.stall_s < RECUR_FACTOR * longest
        )
        self.reported = dataclasses.replace(reported, published=not recurs)
        return not recurs
