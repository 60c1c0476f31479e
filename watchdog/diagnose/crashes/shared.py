"""What the crash rules share: the modes they fire in, and phrases read from the facts (the
job's exit code, the limits on its tasks, where main iterates the loader, where the Dataset's
code is defined, what to do for a class a spawned worker could not unpickle)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ... import frames
from ...types import MODE_CRASH, MODE_HANG, Facts, Frame

CRASH_AND_HANG = (MODE_CRASH, MODE_HANG)
CRASH = (MODE_CRASH,)


def exit_clause(facts: Facts) -> str:
    """``; the job exited with code N`` for evidence lines, or ``""`` while it runs."""
    return "" if facts.exit_code is None else f"; the job exited with code {facts.exit_code}"


def limits_text(facts: Facts, names: Sequence[str]) -> List[str]:
    """``pids.max of cgroup /x = 40`` for each of ``facts.task_limits`` whose name starts with
    one of ``names`` (``unlimited`` for ``None``)."""
    return [
        f"{name} = {'unlimited' if value is None else value}"
        for name, value in facts.task_limits
        if name.startswith(tuple(names))
    ]


def unpickle_remedy(attr: str, module: str) -> str:
    """The remedy for a spawned worker that cannot find ``attr`` in ``module``."""
    named = "" if module in ("__main__", "__mp_main__") else f" ({module} under python -m)"
    return (
        f"A spawned worker re-imports the main script as __mp_main__{named} without "
        f'running its `if __name__ == "__main__":` block, then unpickles the Dataset: {attr} must be an attribute of '
        "that module. Define it at the module's top level, above the guard (not inside the guard, a function or a "
        "notebook cell), or in a module of its own that the script imports."
    )


def dataset_code(facts: Facts, pids: Tuple[int, ...]) -> Optional[Frame]:
    """Where the Dataset's ``__getitem__`` (``__iter__``) of the loader whose worker ``pids``
    were is defined, from the inside view, when it is the job's code (not torch's, not the
    standard library's); else ``None``."""
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if v.dataset_code is not None]
    view = next((v for v in reversed(views) if set(pids) & set(v.workers)), views[-1] if views else None)
    code = view.dataset_code if view is not None else None
    return code if code is not None and frames.is_user(code) else None


def loader_site(facts: Facts) -> Optional[str]:
    """``file:line`` where main iterates the DataLoader whose worker died (the inside view's
    record of the iterator), or ``None``: for a signal death there is no worker traceback, and
    the line main happened to run when SIGCHLD came is no place to change."""
    main = facts.sample.main
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if main is None or v.pid == main.pid]
    site = views[-1].site if views else None
    return f"{site.file}:{site.line}" if site is not None else None
