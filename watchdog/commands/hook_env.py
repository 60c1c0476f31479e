"""``dlwatch hook-env``: the environment that gives ``dlwatch attach`` the inside view of a job
started by hand (``env $(dlwatch hook-env) python train.py``)."""

from __future__ import annotations

import os
import shlex

from ..collect import inside
from ..exits import Exit
from ..watch.job import log


def cmd_hook_env() -> int:
    """Print ``PYTHONPATH=… DLWATCH_HOOK_DIR=…`` with a new private folder, for ``env $(…)``;
    say on stderr where the folder is and what removes it. Hook folders of this user that
    hold nothing and have not changed for a day are swept first (:func:`inside.sweep_stale_folders`).
    Exit code 2 (:attr:`Exit.USAGE`) when the folder cannot be made."""
    for stale in inside.sweep_stale_folders():
        log(f"removed {stale}: made by `dlwatch hook-env` over a day ago, and no job recorded into it")
    try:
        folder = inside.make_folder()
    except OSError as e:
        log(f"error: cannot create the inside view's folder: {e.strerror}")
        return Exit.USAGE
    log(
        f"made {folder.path} for the job's inside view: `dlwatch attach --pid N` removes it when the job ends; "
        "if no job records into it, a later `dlwatch hook-env` removes it after a day"
    )
    env = inside.hook_env(os.environ, folder.path, None)
    # Quoted for the shell where needed: `eval "export $(dlwatch hook-env)"` works with any path;
    # `env $(dlwatch hook-env) …` with paths that hold no spaces.
    print(
        f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])} DLWATCH_HOOK_DIR={shlex.quote(folder.path)} "
        f"{inside.TOKEN_ENV}={env[inside.TOKEN_ENV]}"
    )
    return Exit.OK
