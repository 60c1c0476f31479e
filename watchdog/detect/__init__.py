"""Hang detection: is the job still moving, and can it ever move again? Pure functions of
samples, kernel waits and stacks, one module per concern:

- :mod:`.progress`: the marks, the measure, the batch rhythm, the triggers (NOTE [ Hang criterion ],
  NOTE [ Batch rhythm ]);
- :mod:`.proof`: the kernel proof and the idle loader's (NOTE [ Deadlock proof ]);
- :mod:`.manager_proof` and :mod:`.dead_releaser`: waits through a ``multiprocessing.Manager``
  (NOTE [ Manager lock proof ]);
- :mod:`.assessment`: the examination of a stall, and whether a hang may end the job;
- :mod:`.episode`: one hang from its first look to its end.

This module re-exports what the other rooms use.
"""

from __future__ import annotations

from .assessment import Assessment, assess, confirm, mp_helper, polling, still_moving, termination, working
from .episode import RECUR_FACTOR, Conclusion, Decision, Episode, Reported
from .progress import (
    RUNNABLE_SHARE,
    TRIGGER_BUSY,
    TRIGGER_PROOF,
    TRIGGER_RHYTHM,
    TRIGGER_STALL,
    WORK_WINDOW_S,
    Measure,
    ProgressTracker,
    Rhythm,
    Trigger,
    WorkerBirths,
    batch_measure,
    due_trigger,
    rhythm,
)
from .proof import loader_waits, lock_cycle, prove, prove_loader_idle, role_words

__all__ = [
    "Assessment",
    "Conclusion",
    "Decision",
    "Episode",
    "Measure",
    "ProgressTracker",
    "RECUR_FACTOR",
    "RUNNABLE_SHARE",
    "Reported",
    "Rhythm",
    "TRIGGER_BUSY",
    "TRIGGER_PROOF",
    "TRIGGER_RHYTHM",
    "TRIGGER_STALL",
    "Trigger",
    "WORK_WINDOW_S",
    "WorkerBirths",
    "assess",
    "batch_measure",
    "confirm",
    "due_trigger",
    "loader_waits",
    "lock_cycle",
    "mp_helper",
    "polling",
    "prove",
    "prove_loader_idle",
    "rhythm",
    "role_words",
    "still_moving",
    "termination",
    "working",
]
