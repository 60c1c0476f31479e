"""The inside view read with a tick's sample (``ReadPlan.inside``): every process's records at a
full sample, main's counters first at a lean one (NOTE [ Lean ticks ] in
watchdog/collect/read_plan.py), and the processes the job-level sampler borrowed from the ranks'
samplers taken from their latest samples instead of read again."""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Set, Tuple

from ..types import InsideView, LoaderView, Sample
from .inside import InsideReader


def _batch_counts(loaders: Tuple[LoaderView, ...]) -> Tuple[Tuple[int, int], ...]:
    """``((iterator, batches), ...)`` of ``loaders``."""
    return tuple((v.iterator, v.batches) for v in loaders)


class TickViews:
    """Reads the inside view for a sampler's samples.

    Args:
        inside: the reader of the job's own DataLoader records (``None``: no inside view).
        borrowed_view: ``(loaders, fetches)`` of borrowed pids from their ranks' latest samples
            (``NodeShare.borrowed_view`` in watchdog/collect/sampler.py).
        on_error: told ``where`` after an unexpected exception in a read, from within the
            ``except`` block; the view then says it could not be read.
    """

    def __init__(
        self,
        inside: Optional[InsideReader],
        borrowed_view: Callable[[Set[int]], Tuple[tuple, tuple]],
        on_error: Callable[[str], None],
    ) -> None:
        self.inside = inside
        self._borrowed_view = borrowed_view
        self._on_error = on_error
        self._last_view: Optional[InsideView] = None
        self._view_sample: Optional[Sample] = None  # the last sample read with the inside view

    def read(self, pids: Optional[List[int]] = None, forks: bool = True, counters: bool = False) -> InsideView:
        """The inside view of ``pids`` (every process that recorded, when ``None``; with their
        workers' fork records when ``forks``; only the counters when ``counters``:
        :meth:`InsideReader.read`); never raises (an empty view with a note, ``on_error`` told)."""
        if self.inside is None:
            return InsideView(note="no inside view (not enabled for this job)")
        try:
            return self.inside.read(pids, forks, counters)
        except Exception:
            self._on_error("reading the inside view")
            return InsideView(note="the inside view could not be read")

    def with_view(self, sample: Sample, borrowed: Set[int]) -> Sample:
        """``sample`` with the inside view read for it: at a lean sample main's counters first
        (:meth:`counters_view`), else every process's (:meth:`full_view`; ``borrowed``: the pids
        the sample took from the ranks' samplers). A view equal to the last one is that object
        (the timeline holds one copy)."""
        view = self.counters_view(sample) if sample.lean else self.full_view(sample, borrowed)
        if view == self._last_view:
            view = self._last_view
        self._last_view = view
        sample = dataclasses.replace(sample, loaders=view.loaders, fetches=view.fetches, inside=view)
        self._view_sample = sample
        return sample

    def full_view(self, sample: Sample, borrowed: Set[int]) -> InsideView:
        """The inside view of a full sample's processes; those ``borrowed`` from the ranks'
        samplers have their loaders and workers' counts from the same ranks' latest samples, not
        read again."""
        view = self.read([p.pid for p in sample.processes if p.pid not in borrowed], forks=False)
        if borrowed:
            loaders, fetches = self._borrowed_view(borrowed)
            view = dataclasses.replace(view, loaders=view.loaders + loaders, fetches=view.fetches + fetches)
        return view

    def counters_view(self, sample: Sample) -> InsideView:
        """The inside view's counters at a lean sample (NOTE [ Lean ticks ]): main's loaders
        first; when their batch counts moved since the last sample read with a view (a batch
        reached main: no stall to measure), the workers' sample counts are that sample's, not
        read (a worker's progress is then dated at the next tick that reads them, at most
        ``full_every_s`` later: later than it was, never earlier); else every process's."""
        main = sample.main
        last = self._view_sample
        if main is not None and last is not None and last.loaders and all(v.pid == main.pid for v in last.loaders):
            own = self.read([main.pid], forks=False, counters=True)
            if own.loaders and _batch_counts(own.loaders) != _batch_counts(last.loaders):
                return dataclasses.replace(own, fetches=last.fetches)
        return self.read([p.pid for p in sample.processes], forks=False, counters=True)
