"""Hang rules: what a stalled job's stacks, kernel waits, proof and stderr say.

Rules read the states decided once in :mod:`watchdog.states` and :func:`common.worker_views`
(how each thread waits, what each worker's loop does) and the facts' proof; none matches on
another rule's evidence text. A worker idle in ``index_queue.get`` is healthy, and main in
``_try_get_data`` is only the symptom.

One module per family, imported in the order their rules were registered before the split:

- :mod:`.fork`: locks inherited through ``fork()`` (``fork_inherited_lock``);
- :mod:`.locks`: lock cycles and locks taken twice among the living (``worker_deadlock``,
  ``main_thread_deadlock``);
- :mod:`.stuck`: workers blocked in the kernel or stuck in the user's code, a poll or a Manager call
  (``worker_blocked_io``, ``worker_stuck``);
- :mod:`.helpers`: helpers of the job that ended, workers that ``exec``'d (``worker_exec``);
- :mod:`.lost`: a lost batch, the pin-memory thread, the shutdown's join, uneven inputs, main stalled
  outside the loader (``batch_lost``, ``pin_memory_stall``, ``shutdown_hang``, ``uneven_batches``,
  ``stall_outside_loader``);
- :mod:`.shared`: what they all use.
"""

from __future__ import annotations

from . import fork, helpers, locks, lost, stuck  # noqa: F401  (register the rules, in this order)
from .helpers import ended_helpers, feeder_failures
from .stuck import runnable_spin

__all__ = ["ended_helpers", "feeder_failures", "runnable_spin"]
