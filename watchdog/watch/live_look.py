"""The look at a live job for warnings (``warning_interval_s`` apart, on full samples): the
input-bound verdict for ``dlwatch status`` and the metrics, and each new warning published once
per kind and process set, at most every ``_WARNING_COOLDOWN_S``."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from ..collect.warning_stacks import WarningStacks
from ..diagnose import diagnose, throughput
from ..types import MODE_LIVE, SEVERITY_WARNING, Facts, InsideView, Sample

# Seconds between two warnings of the same kind (a new process set each epoch would repeat them).
_WARNING_COOLDOWN_S = 600.0


class LiveLook:
    """Looks for warnings in the live job and remembers what it warned of.

    Args:
        warning_stacks: takes the warned processes' stacks (``py_spy.at_warning``).
        publish: ``publish(facts, diagnoses, action, suffix, summary_only=True)`` writes one
            report (:meth:`watchdog.watch.publish.Publisher.publish`).
        host_cpus: the host's CPUs.
        worker_clock: keep the workers' seconds by state (:attr:`worker_seconds`), which only
            ``dlwatch_worker_seconds_total`` reads: ``False`` where no metrics are served.
    """

    def __init__(
        self,
        warning_stacks: WarningStacks,
        publish: Callable[..., Optional[str]],
        host_cpus: int,
        worker_clock: bool = True,
    ) -> None:
        self.warning_stacks = warning_stacks
        self._publish = publish
        self._host_cpus = host_cpus
        # kind -> (when it was last warned of, monotonic seconds; its processes)
        self.warned: Dict[str, Tuple[float, frozenset]] = {}
        self._worker_clock = throughput.WorkerClock() if worker_clock else None
        self.input_verdict: Optional[Any] = None  # throughput.Judgement at the last look
        self.worker_seconds: Tuple[Tuple[str, str, float], ...] = ()

    def look(self, sample: Sample, timeline: Tuple[Sample, ...], view: InsideView) -> None:
        """Diagnose the live job at ``sample`` (a full one, the last of ``timeline``) with
        ``view``, the inside view read with it (whole: not a lean sample's counters), and
        publish each new warning."""
        facts = Facts(mode=MODE_LIVE, sample=sample, timeline=timeline, host_cpus=self._host_cpus, inside=view)
        if self._worker_clock is not None:
            self._worker_clock.update(facts.timeline)  # NOTE [ Input-bound verdict ]: from samples taken
            self.worker_seconds = self._worker_clock.totals()
        self.input_verdict = throughput.judge(facts)
        for d in diagnose(facts):
            if d.severity != SEVERITY_WARNING:
                continue
            last = self.warned.get(d.kind)
            pids = frozenset(d.pids)
            if last is not None and (last[1] == pids or sample.t_mono - last[0] < _WARNING_COOLDOWN_S):
                continue  # at most once per kind and process set, and not more often than the cooldown
            self.warned[d.kind] = (sample.t_mono, pids)
            self.warning_stacks.take(d.pids, d.kind)
            self._publish(facts, (d,), "report", f"warning-{d.kind}", summary_only=True)
