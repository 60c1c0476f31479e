"""``dlwatch status --pid N``: the job's inside view and pinned memory, now, and over a short
window whether it is input-bound."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from ..collect import inside, procfs
from ..collect.sampler import Sampler
from ..diagnose import throughput
from ..exits import Exit
from ..report import document as report
from ..report import rendering
from ..types import MODE_LIVE, Facts
from .common import job_of


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status document (text or ``--json``); exit code 0.

    Raises:
        TargetError: the pid cannot be watched (:func:`~.common.job_of`).
    """
    proc, tree = job_of(args.pid)
    folder = inside.folder_of(proc.pid)
    reader = inside.InsideReader(
        folder.path if folder else None,
        "no inside view: start the job with `dlwatch run` or `env $(dlwatch hook-env) …`",
    )
    pids = [p.pid for p in tree]
    view = reader.read(pids)
    view = dataclasses.replace(view, forks=tuple(r for r in view.forks if r.pid in pids))  # this process's tree only
    pinned = {p.pid: procfs.pinned_bytes(p.pid) for p in tree if procfs.maps_summary(p.pid).nvidia}
    sampler = Sampler(proc.pid, 1.0)
    sample = sampler.sample()  # the outside view: main and its workers now (USS, PSS once)
    doc = report.status_document(view, pinned, time.monotonic(), sample.processes)
    verdict = _input_verdict(sampler, reader, dataclasses.replace(sample, loaders=view.loaders), args.window)
    if verdict is not None:
        doc["input"] = verdict.as_dict()
    try:
        text = "\n".join(rendering.status_lines(doc) + (verdict.lines() if verdict is not None else []))
        print(json.dumps(doc, indent=1) if args.json else text, flush=True)
    except BrokenPipeError:  # `dlwatch status … | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return Exit.OK


def _input_verdict(sampler, reader, first, window_s: float):
    """The input-bound verdict (:func:`watchdog.diagnose.throughput.judge`) over ``window_s``
    seconds from ``first`` (a sample with the inside view's loaders): a sample every half second
    with the inside view read again; ``None`` for a window of 0."""
    if window_s <= 0:
        return None
    samples = [first]
    view = None
    while samples[-1].t_mono - first.t_mono < window_s:
        time.sleep(min(0.5, max(0.05, window_s - (samples[-1].t_mono - first.t_mono))))
        s = sampler.sample()
        if s.main is None:
            break
        view = reader.read([p.pid for p in s.processes])
        samples.append(dataclasses.replace(s, loaders=view.loaders, fetches=view.fetches))
    facts = Facts(
        mode=MODE_LIVE,
        sample=samples[-1],
        timeline=tuple(samples),
        host_cpus=os.cpu_count() or 1,
        inside=view if reader.folder is not None else None,
    )
    return throughput.judge(facts, window_s=window_s + 1.0, min_span_s=0.8 * window_s, min_batches=3)
