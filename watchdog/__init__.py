"""dataloader-watchdog: a sidecar that tells why a PyTorch training job stopped moving.

The package has rooms by role, and dependencies point one way (``tests/unit/test_layout.py``
holds it: leaves → collect → detect → diagnose → report → watch → commands)::

    commands/  cli (the parser, ``dlwatch run|attach|dump|status|show|reports``), verify,
     │         cluster: what a user runs
    watch/     node_loop.NodeLoop (one Watcher per rank, all stepped by one loop, each
     │         examination in a thread of its own); watcher.Watcher: every interval_s one
     │         tick; a due stall goes to hang_episodes (examine -> decide -> hang_look: closer
     │         look, Facts -> publish: write + alert -> act); exit_look: the job's end;
     │         metrics (the endpoint), terminal, wake
    report/    document (report.json / report.txt), writer (atomic, owner-only), html, browse,
     │         schema/
    diagnose/  engine + rules (hangs, crashes, data, live, throughput) -> Diagnosis, ranked
     │ Facts (everything one report rests on)
    detect     ProgressTracker (Measure: batches | main_wait | activity) -> Stall;
     │         Episode: due(stall) -> trigger, conclude(Evidence) -> Decision
     │         (prove -> Proof, assess -> Assessment, termination -> Termination)
     │ Sample, ThreadSample, ProcessStack, Evidence, ProcId      (types.py records)
    collect/   sampler (Sample), discovery (roles), inside (the job's own recorder files),
     │         procfs/waits (kernel waits), examine (the I/O of a look at a stall), pyspy,
     │         chain, cgroup, stderr_tail, launch
    leaves     types, config, argtypes, errors, exits, redact, frames, states, text, children

No stage reads back another's sentences: a finding's words come from diagnose, the report's
layout from report.

Note: ``watchdog`` is also the import name of an unrelated file-system-events package on PyPI.
Install this sidecar in its own virtual environment when the job's environment has that one.
"""

__version__ = "0.1.0"
DISTRIBUTION = "dataloader-watchdog"
