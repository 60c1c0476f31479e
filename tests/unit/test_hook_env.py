"""``dlwatch hook-env``: it says where the folder it made is and what removes it, and sweeps the
empty folders earlier calls left for jobs that never recorded (a day old)."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from watchdog import cli
from watchdog.collect import inside


@pytest.fixture
def tmpdir_here(tmp_path, monkeypatch):
    """The temporary directory ``make_folder`` uses, pointed at ``tmp_path`` (0700, ours)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _hook_folders(parent) -> list:
    return sorted(n for n in os.listdir(parent) if n.startswith(inside.HOOK_PREFIX))


def _age(path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def test_hook_env_says_where_its_folder_is_and_what_removes_it(tmpdir_here, capsys):
    assert cli.main(["hook-env"]) == 0
    out, err = capsys.readouterr()
    (name,) = _hook_folders(tmpdir_here)
    path = str(tmpdir_here / name)
    assert f"DLWATCH_HOOK_DIR={path} " in out and path not in err.replace(f"made {path} ", "")
    assert f"made {path} for the job's inside view: `dlwatch attach --pid N` removes it when the job ends" in err
    assert err.count("\n") == 1, err


def test_hook_env_sweeps_its_empty_folders_a_day_old_and_nothing_else(tmpdir_here, capsys):
    stale = inside.make_folder().path
    _age(stale, 2 * 86400)
    used = inside.make_folder().path  # a job recorded into it: attach removes it, not the sweep
    with open(os.path.join(used, "1234.json"), "w") as f:
        f.write("{}")
    _age(used, 2 * 86400)
    fresh = inside.make_folder().path  # made an hour ago for a job not started yet
    _age(fresh, 3600)
    opened = inside.make_folder().path  # open to others: not one dlwatch made
    os.chmod(opened, 0o755)
    _age(opened, 2 * 86400)
    elsewhere = tmpdir_here / "elsewhere"  # a link named like a hook folder, to an old empty folder
    elsewhere.mkdir(mode=0o700)
    _age(elsewhere, 2 * 86400)
    link = tmpdir_here / (inside.HOOK_PREFIX + "abcdefgh")
    link.symlink_to(elsewhere)
    _age(link, 2 * 86400)
    before = set(_hook_folders(tmpdir_here))

    assert cli.main(["hook-env"]) == 0
    err = capsys.readouterr().err
    after = set(_hook_folders(tmpdir_here))
    assert before - after == {os.path.basename(stale)}, (before, after)
    assert f"removed {stale}: made by `dlwatch hook-env` over a day ago" in err
    assert os.path.isfile(os.path.join(used, "1234.json")) and os.path.isdir(fresh) and os.path.isdir(opened)
    assert link.is_symlink() and elsewhere.is_dir()
    assert len(after - before) == 1  # the new folder


def test_the_sweep_leaves_a_parent_others_may_rename_entries_of(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    folder = os.path.join(parent, inside.HOOK_PREFIX + "abcdefgh")
    os.mkdir(folder, 0o700)
    _age(folder, 2 * 86400)
    os.chmod(parent, 0o777)  # group and others may write it, no sticky bit
    assert inside.sweep_stale_folders(str(parent)) == [] and os.path.isdir(folder)
    os.chmod(parent, 0o700)
    assert inside.sweep_stale_folders(str(parent)) == [folder] and not os.path.exists(folder)
