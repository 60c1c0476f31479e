"""``dlwatch dump --pid N``: the stacks of the job's main process and every worker, now."""

from __future__ import annotations

import argparse
import json

from ..collect import pyspy
from ..collect.sampler import Sampler
from ..exits import Exit
from ..report import document as report
from ..report import rendering
from ..types import StackFailureKind
from ..watch.job import log
from .common import job_of, print_text


def cmd_dump(args: argparse.Namespace) -> int:
    """Dump, with py-spy, the stacks of the processes a hang report dumps; exit code 2
    (:attr:`Exit.USAGE`) when py-spy is missing or no stack could be read.

    Raises:
        TargetError: the pid cannot be watched (:func:`~.common.job_of`).
    """
    proc, _tree = job_of(args.pid)
    path = pyspy.find_pyspy()
    if path is None:
        log("error: py-spy not found (beside this Python or on $PATH): pip install py-spy")
        return Exit.USAGE
    sample = Sampler(proc.pid, 1.0).sample()
    pids = [p.pid for p in sample.processes if p.role in report.DUMPED_ROLES]
    d_state = [p.pid for p in sample.processes if p.state == "D"]
    stacks = pyspy.dump_all(pids, path, args.native, args.timeout, args.locals, d_state)
    doc = report.dump_document(sample, stacks)
    print_text(json.dumps(doc, indent=1) if args.json else "\n".join(rendering.dump_lines(doc)))
    failed = [st.error for st in stacks.values() if st.error is not None]
    if failed and len(failed) == len(stacks):
        refused = any(e.kind is StackFailureKind.PTRACE_REFUSED for e in failed)
        first = next((e for e in failed if e.kind is not StackFailureKind.NOT_RUN), failed[0])
        log(f"error: no stack could be read ({first.detail}){'; see README: Permissions' if refused else ''}")
        return Exit.USAGE
    return Exit.OK
