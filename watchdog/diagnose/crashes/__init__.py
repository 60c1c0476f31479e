"""Crash rules: the job (or a worker) died, and PyTorch said why on stderr.

They read PyTorch's own error text in the stderr tail, parsed once into
:class:`~watchdog.collect.stderr_facts.StderrFacts`, together with what the timeline saw of the
processes, and fire in ``crash`` mode (the job exited) and most of them in ``hang`` mode too
(an exhausted resource explains a lost batch). Errors that carry an errno are classified by
it, not by their wording (NOTE [ Errno classes ] in :mod:`.resources`). Messages matched, from
torch/utils/data/dataloader.py (``_try_get_data``), torch/utils/data/_utils/signal_handling.py
and torch/csrc/DataLoader.cpp (worker signal handlers), aten/src/ATen/MapAllocator.cpp
("unable to open shared memory object", "unable to mmap"), torch/utils/data/_utils/worker.py
(``ExceptionWrapper``: "Caught X in DataLoader worker process N" and "Original Traceback"),
torch/cuda (lazy init), and CPython multiprocessing.

One module per failure family. Rules of one rank are registered in one module, in the order
that breaks their ties (NOTE [ Rule ranks ]), so the order of these modules' import does not
matter:

- :mod:`.resources`: ``/dev/shm``, a file system, descriptors, memory maps ran out (by errno);
  files left in ``/dev/shm``;
- :mod:`.workers`: a worker killed by a signal or exited with a code (with :mod:`.memory`,
  what the timeline says of its memory);
- :mod:`.start`: workers that could not start, CUDA in a forked worker;
- :mod:`.timeout`: ``DataLoader(timeout=N)`` expired;
- :mod:`.exceptions`: an exception in the Dataset, ``collate_fn`` or ``worker_init_fn``;
- :mod:`.main_process`: main died of a signal.
"""

from __future__ import annotations

from . import exceptions, main_process, resources, start, timeout, workers  # noqa: F401  (register the rules)
