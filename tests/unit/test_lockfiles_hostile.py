"""Lock files are named by the job: their names (and the folder a process works in) reach the
report's evidence and its ``fix:`` line ("delete the file PATH"). A name may hold a line break,
so a job could start a line of the report and of the summary on stderr that reads as one of
dlwatch's own (``  action: ...``). :func:`watchdog.collect.lockfiles.find` shows such a path on
one line, its breaks written as escapes (watchdog.text.one_line)."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.builders import proc, sample
from watchdog.collect import lockfiles
from watchdog.types import ROLE_MAIN


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(30)
    return p.pid


def test_a_lock_file_name_with_a_line_break_is_shown_on_one_line(tmp_path):
    folder = tmp_path / "work\n  cause: folder"
    folder.mkdir()
    name = "shards\n  action: report (nothing ended)\x1b[2J.lock"
    (folder / name).write_text(f"{_dead_pid()}\n")
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=str(folder))
    try:
        found = lockfiles.find(sample(0.0, [proc(job.pid, ROLE_MAIN, [])]))
    finally:
        job.kill()
        job.wait(30)
    (lock,) = [x for x in found if "shards" in x.path]
    assert "\n" not in lock.path and "\x1b" not in lock.path, repr(lock.path)
    assert "shards\\n  action: report (nothing ended)\\x1b[2J.lock" in lock.path
    assert "work\\n  cause: folder" in lock.path
    assert lock.holder == "gone"
