"""``attach --pid`` given a process that is not Python (a launcher shell): the error names the
Python processes it started, so that the user can attach to one of them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from watchdog.collect import discovery
from watchdog.errors import NotPython


def _shell_with_python_child(tmp_path, secret: str = ""):
    """``sh -c 'PY -c SLEEP --token SECRET; :'`` (the ``; :`` keeps sh from exec'ing its last
    command), and the pid of its Python child once it runs."""
    script = "import time; time.sleep(60)"
    shell = subprocess.Popen(["/bin/sh", "-c", f"'{sys.executable}' -c '{script}' --token {secret or 'x'} ; :"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        kids = discovery.children(discovery.psutil.Process(shell.pid))
        if kids and kids[0].cmdline()[:1] == [sys.executable]:
            return shell, kids[0].pid
        time.sleep(0.05)
    shell.kill()
    pytest.fail("the shell's Python child never started")


def _end(shell: subprocess.Popen) -> None:
    for child in discovery.children(discovery.psutil.Process(shell.pid)):
        child.kill()
    shell.kill()
    shell.wait(timeout=10)


def test_a_launcher_shell_is_refused_with_its_python_children_named(tmp_path, capsys):
    from watchdog import cli

    shell, child = _shell_with_python_child(tmp_path, secret="hunter2hunter2")
    try:
        with pytest.raises(NotPython) as e:
            discovery.check_target(shell.pid)
        message = str(e.value)
        assert message.startswith(f"--pid {shell.pid}: not a Python process (")
        assert f"its Python children: {child} ({os.path.basename(sys.executable)} -c import time" in message, message
        assert message.endswith(": attach to one of them") and "hunter2hunter2" not in message, message
        assert e.value.children[0][0] == child
        assert discovery.check_target(child).pid == child  # the named child is accepted
        assert cli.main(["attach", "--pid", str(shell.pid)]) != 0
        err = capsys.readouterr().err
        assert f"its Python children: {child} (" in err and err.count("\n") == 1, err
    finally:
        _end(shell)


def test_a_process_that_started_no_python_says_so():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(NotPython, match=r"not a Python process \(.*sleep\), and it has started no Python process"):
            discovery.check_target(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
