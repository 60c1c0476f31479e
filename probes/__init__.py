"""Reproductions and benchmarks for dataloader-watchdog, runnable from the shell.

Two kinds of module live here:

* *targets* — plain training jobs that misbehave on purpose (``probes.train``). They never
  import :mod:`watchdog`; each docstring says how to run it and what the watchdog must conclude.
* *clients* — runners that start a target under the watchdog (``probes.demo``).

In a source tree the package is ``probes``; installed (``pip install .``) it is
``watchdog.probes``, inside the distribution's own namespace (setup.cfg's ``package_dir``),
so that no top-level ``probes`` lands in site-packages. Children are started by module name
through :func:`module_name`, which gives the name this copy was imported under.
"""

PACKAGE = __name__  # "probes" in a source tree, "watchdog.probes" once installed


def module_name(name: str) -> str:
    """The importable name of this package's module ``name`` (``"train"``, ``"cases.shm_removed"``),
    for ``python -m``."""
    return f"{PACKAGE}.{name}"
