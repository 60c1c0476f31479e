"""Reproductions and benchmarks for dataloader-watchdog, runnable from the shell.

Two kinds of module live here:

* *targets* — plain training jobs that misbehave on purpose (``probes.train``). They never
  import :mod:`watchdog`; each docstring says how to run it and what the watchdog must conclude.
* *clients* — runners that start a target under the watchdog (``probes.demo``).
"""
