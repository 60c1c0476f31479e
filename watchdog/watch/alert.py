"""Alert hooks: the user's command, run after a report is written (``on_hang_exec``,
``on_crash_exec``, ``on_warning_exec``). Like ``act``, a module with side effects; it never
raises into the watch loop and never blocks it: each command runs in a thread of its own,
through ``/bin/sh -c`` (so ``$DLWATCH_REPORT`` expands), with stdin closed, its output
discarded and a timeout; a failure is logged in one line and changes nothing else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Callable, Dict, List, Mapping, Optional

from .. import children
from ..config import AlertsConfig

# Bytes of a command's stderr kept for the log line when it fails.
_STDERR_KEPT = 4096
# Report modes -> the setting whose command runs for them.
SETTING_OF_MODE = {
    "hang": "on_hang_exec",
    "crash": "on_crash_exec",
    "live": "on_warning_exec",
    "exit": "on_warning_exec",
}


class Alerts:
    """Runs the configured command for each report.

    Args:
        commands: setting name (``on_hang_exec``, …) -> shell command, or ``None`` for none.
        timeout_s: seconds a command may run before it is killed.
        log: where one-line failures go.
    """

    def __init__(self, commands: Mapping[str, Optional[str]], timeout_s: float, log: Callable[[str], None]) -> None:
        self.commands = {k: v for k, v in commands.items() if v}
        self.timeout_s = timeout_s
        self.log = log
        self._threads: List[threading.Thread] = []

    @classmethod
    def of(cls, alerts: AlertsConfig, log: Callable[[str], None]) -> "Alerts":
        """The alerts that the ``alerts:`` settings configure."""
        return cls({k: getattr(alerts, k) for k in set(SETTING_OF_MODE.values())}, alerts.exec_timeout_s, log)

    def fire(self, mode: str, env: Mapping[str, str]) -> None:
        """Run the command for a report of ``mode`` (``hang``, ``crash``, ``live``, ``exit``),
        with ``env`` (``DLWATCH_REPORT``, ``DLWATCH_KIND``, …) added to dlwatch's environment."""
        setting = SETTING_OF_MODE.get(mode)
        cmd = self.commands.get(setting or "")
        if not cmd:
            return
        # An environment value cannot hold a NUL (execve); the job's text may (its exception).
        full = {**os.environ, **{k: v.replace("\0", "\\x00") for k, v in env.items()}}
        t = threading.Thread(target=self._run, args=(setting, cmd, full), name=f"alert-{setting}", daemon=True)
        self._threads.append(t)
        t.start()

    def _run(self, setting: str, cmd: str, env: Dict[str, str]) -> None:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", cmd],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # never in the job's or the terminal's process group
            )
        except (OSError, ValueError) as e:  # ValueError: a NUL in the command or the environment
            self.log(f"{setting} could not run: {getattr(e, 'strerror', None) or e}")
            return
        tail = bytearray()
        stderr = proc.stderr  # a pipe: stderr=subprocess.PIPE

        def drain() -> None:  # keep only the end of what it prints: a chatty command costs no memory
            if stderr is None:
                return
            for chunk in iter(lambda: stderr.read(65536), b""):
                tail.extend(chunk)
                del tail[:-_STDERR_KEPT]

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            code = proc.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            children.signal_group(proc, signal.SIGKILL)  # its whole session: children too
            proc.wait()  # stderr stays the drain thread's: not read here
            self.log(
                f"{setting} ran longer than exec_timeout_s ({self.timeout_s:g} s) and was killed, with its children"
            )
            return
        finally:
            reader.join(1.0)
        if code != 0:
            last = bytes(tail).decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            self.log(f"{setting} exited with code {code}: {last[0][:200]}")

    def wait(self, timeout_s: float, interrupted: Callable[[], bool] = lambda: False) -> None:
        """Wait up to ``timeout_s`` seconds in all for commands still running (at exit), or
        until ``interrupted()`` (a signal sent to dlwatch meanwhile): then the commands are
        left running and said so."""
        import time

        deadline = time.monotonic() + timeout_s
        while any(t.is_alive() for t in self._threads) and time.monotonic() < deadline:
            if interrupted():
                left = sum(t.is_alive() for t in self._threads)
                self.log(f"a signal cut the wait for alert commands short; {left} left running")
                return
            for t in self._threads:
                t.join(min(0.1, max(0.0, deadline - time.monotonic())))
