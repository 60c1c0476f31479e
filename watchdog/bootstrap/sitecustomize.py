"""dlwatch's bootstrap: gives the watchdog the DataLoader's own view of the job.

``dlwatch run`` puts this folder first on the job's ``PYTHONPATH`` and sets
``DLWATCH_HOOK_DIR``; Python's ``site`` module imports ``sitecustomize`` at start-up
(https://docs.python.org/3/library/site.html). This file:

1. arms the recorder (``_dlwatch_arm.arm``), which imports and does nothing until the job
   imports ``torch.utils.data.dataloader`` (then it loads ``_dlwatch_inside``), and nothing at
   all in a process whose parent chain does not lead to the watchdog, or when
   ``DLWATCH_HOOK_DIR`` is unset (``dlwatch run --no-hook``);
2. then runs the ``sitecustomize`` the environment already had (the next one on ``sys.path``),
   so that the job starts exactly as it would without dlwatch. An error in that one reaches
   ``site`` as it would have without us; an error of ours never does.

Standard library only: the job's Python may be another interpreter than dlwatch's.
"""


def _dlwatch_boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("DLWATCH_HOOK_DIR"):
        try:
            import _dlwatch_arm

            _dlwatch_arm.arm()
        except Exception:  # never let the hook reach the job
            pass
    import importlib.machinery
    import importlib.util

    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_dlwatch_boot()
del _dlwatch_boot
