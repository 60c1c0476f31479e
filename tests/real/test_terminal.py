"""A job that reads its terminal works under ``dlwatch run`` as it does without it
(watchdog/watch/terminal.py): ``input()`` is answered, ``breakpoint()`` is continued, Ctrl-C reaches
the job and is not diagnosed as a crash. Each run is driven through a real pseudo-terminal
(``pty.fork``: dlwatch is its session's leader and foreground group, as under a shell), bounded
in time, and every process of the session is killed whatever happens."""

from __future__ import annotations

import os
import pty
import select
import signal
import time

import psutil
import pytest

from tests.real.helpers import DLWATCH, ROOT

PROMPTS = (
    "import sys\n"
    "name = input('name? ')\n"
    "print('got', name, flush=True)\n"
    "breakpoint()\n"
    "print('after the breakpoint', flush=True)\n"
)


class Pty:
    """``argv`` run in a new session on a pseudo-terminal; ``expect`` reads until a text shows."""

    def __init__(self, argv, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: dlwatch, the session leader, owning the terminal
            try:
                os.chdir(ROOT)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.seen = ""

    def expect(self, text: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} never showed; the terminal showed:\n{self.seen}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # EIO: the session's last writer closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"{text!r} never showed before the terminal closed:\n{self.seen}")
                self.seen += chunk.decode(errors="replace")
        return self.seen

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout_s: float = 60.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.pid = 0
                return os.waitstatus_to_exitcode(status)
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.2)
                if ready:
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"dlwatch did not exit within {timeout_s} s:\n{self.seen}")

    def close(self) -> None:
        """SIGKILL every process of the session (dlwatch's group and the job's own), then reap."""
        if self.pid:
            sid = self.pid
            for p in psutil.process_iter():
                try:
                    if os.getsid(p.pid) == sid:
                        p.kill()
                except (OSError, psutil.Error):
                    pass
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        os.close(self.fd)


@pytest.fixture
def term_env(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1", TERM="dumb")
    env.pop("PYTHONBREAKPOINT", None)
    return env


@pytest.mark.timeout(120)
def test_a_job_that_prompts_and_stops_at_a_breakpoint_works_as_without_dlwatch(tmp_path, term_env):
    term = Pty(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", DLWATCH[0], "-c", PROMPTS], term_env)
    try:
        term.expect("name? ")
        term.send(b"alice\n")
        term.expect("got alice")
        term.expect("(Pdb) ")
        term.send(b"c\n")
        term.expect("after the breakpoint")
        assert term.wait() == 0
        assert "paused" not in term.seen and "stopped" not in term.seen, term.seen
    finally:
        term.close()
    assert not os.listdir(tmp_path)  # no report


@pytest.mark.timeout(120)
def test_ctrl_c_reaches_the_job_from_the_terminal_and_is_no_crash(tmp_path, term_env):
    job = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    term = Pty(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", DLWATCH[0], "-c", job], term_env)
    try:
        term.expect("ready")
        term.send(b"\x03")
        code = term.wait()
        assert code in (130, -signal.SIGINT), term.seen
        assert "KeyboardInterrupt" in term.seen
        assert "job crashed" not in term.seen
    finally:
        term.close()
    assert not os.listdir(tmp_path)


@pytest.mark.timeout(120)
def test_a_job_stopped_reading_the_terminal_from_the_background_is_said_to_wait_for_input(tmp_path, term_env):
    # In the terminal's session: a job in a background group of its own reads the terminal (the
    # kernel stops it with SIGTTIN), and dlwatch attaches to it from the foreground group.
    job = "import os, time\nos.setpgid(0, 0)\ntime.sleep(0.5)\ninput()\n"
    launcher = (
        "import os, sys\n"
        f"pid = os.fork()\nif pid == 0:\n    os.execv(sys.executable, [sys.executable, '-c', {job!r}])\n"
        "print('job', pid, flush=True)\n"
        f"os.execv(sys.executable, {DLWATCH!r} + ['attach', '--pid', str(pid), '--interval', '0.5', "
        f"'--report-dir', {str(tmp_path)!r}])\n"
    )
    term = Pty([DLWATCH[0], "-c", launcher], term_env)
    try:
        text = term.expect("stall clock waits", timeout_s=30)
        assert "waiting for terminal input (SIGTTIN/SIGTTOU" in text and "paused" not in text, text
    finally:
        term.close()


@pytest.mark.timeout(120)
def test_the_terminals_settings_come_back_when_a_job_that_changed_them_is_killed(tmp_path, term_env):
    import termios

    job = (
        "import os, termios\n"
        "mode = termios.tcgetattr(0)\nmode[3] &= ~termios.ECHO\ntermios.tcsetattr(0, termios.TCSANOW, mode)\n"
        "print('echo off', flush=True)\nos.kill(os.getpid(), 9)\n"
    )
    term = Pty(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", DLWATCH[0], "-c", job], term_env)
    try:
        term.expect("echo off")
        term.wait()
        assert termios.tcgetattr(term.fd)[3] & termios.ECHO, "dlwatch left the terminal without echo"
    finally:
        term.close()


@pytest.mark.timeout(120)
def test_the_terminal_prompt_case_takes_its_answers_through_the_terminal_under_dlwatch(tmp_path, term_env):
    case = [DLWATCH[0], "-m", "probes.cases.healthy_terminal_prompt"]
    term = Pty(DLWATCH + ["run", "--stall-timeout", "5", "--report-dir", str(tmp_path), "--", *case], term_env)
    try:
        term.expect("replace checkpoint.pt? [y]es, [n]o: ")
        term.send(b"y\n")
        term.expect("answer y")
        term.expect("(Pdb) ")
        term.send(b"c\n")
        term.expect("done")
        assert term.wait() == 0
    finally:
        term.close()
    assert not os.listdir(tmp_path)
