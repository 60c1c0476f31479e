"""dataloader-watchdog: a sidecar that tells why a PyTorch training job stopped moving.

The pipeline runs in one direction (``tests/unit/test_layout.py`` holds it)::

    cli ── config, terminal (the job's terminal under `run`), ranks (one Watcher per rank,
     │     all stepped by one loop, each examination in a thread of its own; they read each
     │     other through Watcher.status())
     └─ daemon.Watcher: the loop; every interval_s one tick; a due stall goes to
          hang_episodes (examine -> decide -> hang_look: closer look, Facts -> publish:
          write + hook -> act; outcome.json); exit_look: what is kept for the job's end
          collect/  sampler (Sample), discovery (roles), inside (the job's own recorder
                    files), procfs/waits (kernel waits), examine (the I/O of a look at a
                    stall: Evidence, then the closer look of a report), pyspy, chain, cgroup
            │ Sample, ThreadSample, ProcessStack, Evidence, ProcId      (types.py records)
          detect    ProgressTracker (Measure: batches | main_wait | activity) -> Stall;
                    Episode: due(stall) -> trigger, conclude(Evidence) -> Decision
                    (prove -> Proof, assess -> Assessment, termination -> Termination)
            │ Facts (everything one report rests on)
          diagnose/ engine + rules (hangs, crashes, data, live) -> Diagnosis, ranked
            │ Diagnosis
          report    report.json / report.txt / raw stacks (writer: atomic, owner-only),
                    html, metrics, alert; act (SIGTERM/SIGKILL, identity-checked)

Stages exchange the frozen records of :mod:`watchdog.types`; only :mod:`watchdog.daemon`
(with its helpers hang_episodes, hang_look, exit_look, publish) and :mod:`watchdog.cli` wire
them together. No stage reads back another's sentences: a finding's words come from
diagnose, the report's layout from report.

Note: ``watchdog`` is also the import name of an unrelated file-system-events package on PyPI.
Install this sidecar in its own virtual environment when the job's environment has that one.
"""

__version__ = "0.1.0"
DISTRIBUTION = "dataloader-watchdog"
