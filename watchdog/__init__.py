"""dataloader-watchdog: a sidecar that tells why a PyTorch training job stopped moving.

The pipeline runs in one direction::

    collect (procfs, discovery, pyspy) -> detect -> diagnose -> report -> act

Stages exchange the frozen records of :mod:`watchdog.types`; only :mod:`watchdog.daemon` and
:mod:`watchdog.cli` wire them together.

Note: ``watchdog`` is also the import name of an unrelated file-system-events package on PyPI.
Install this sidecar in its own virtual environment when the job's environment has that one.
"""

__version__ = "0.1.0"
DISTRIBUTION = "dataloader-watchdog"
