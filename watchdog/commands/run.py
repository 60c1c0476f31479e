"""``dlwatch run [options] -- CMD ARGS…``: start the job in its own process group, watch it,
pass on its exit code (or 124 when dlwatch ended it).

:class:`JobRun` holds one run's state as attributes and takes it through its phases, one
method each (gunicorn's ``Arbiter`` shape): catch the signals, start the job, forward signals
and reap it on two threads, watch, then after its end diagnose, clean up, say how it ended
and write the summary. When dlwatch has the terminal, the job gets it while it runs
(:mod:`watchdog.watch.terminal`).
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, List, Optional, Tuple

from .. import children, redact
from .. import config as config_mod
from ..collect import inside
from ..collect.launch import context as launch_context
from ..collect.stderr_tail import StderrTail
from ..errors import ConfigError, ReportWriteError
from ..exits import Exit, of_signal
from ..report import writer
from ..types import Launch, ReportWritten
from ..watch import act
from ..watch.job import Outcome, WatchedJob, log
from ..watch.node_loop import NodeLoop
from ..watch.terminal import JobControl, wait_job
from ..watch.wake import Waker
from .common import FORWARDED, attach_metrics, metrics_origin, start_metrics
from .verify_runs import RunBound

# Seconds to wait for the job's stderr to close after it exits (orphans may hold it open).
_STDERR_DRAIN_S = 2.0
# The bytes of a script's first line the kernel reads for its `#!` (BINPRM_BUF_SIZE).
_SHEBANG_BYTES = 256


def cmd_run(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    """Run the job of ``args.cmd`` under watch; its exit code, or one of :class:`Exit`.

    Raises:
        ConfigError: no command given, or the metrics port cannot be served.
    """
    return JobRun(args, cfg).run()


class JobRun:
    """One ``dlwatch run``: the job, the threads that reap it and forward signals to it, its
    watcher and what is cleaned up after it. Signal handlers only append to ``pending`` and
    ``received`` and set the wakers; the forwarder thread signals the job's group."""

    def __init__(self, args: argparse.Namespace, cfg: config_mod.Config) -> None:
        """Take the parsed ``args`` (the job's command after ``--``, the bound flags) and the
        settings ``cfg``; nothing is started yet.

        Raises:
            ConfigError: ``args.cmd`` holds no command.
        """
        self.args = args
        self.cfg = cfg
        self.cmd: List[str] = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not self.cmd:
            raise ConfigError("CMD", "no command given; usage: dlwatch run [options] -- CMD ARGS…", "command line")
        self.wake, self.forward_wake, self.ended = Waker(), Waker(), threading.Event()
        self.pending: List[int] = []  # signals caught and not forwarded yet
        self.received: List[int] = []  # every signal forwarded to the job, in order
        self.server = None
        self.collector = None
        self.folder: Optional[inside.HookFolder] = None
        self.reader: Optional[inside.InsideReader] = None
        self.tail: Optional[StderrTail] = None
        self.proc: Optional[subprocess.Popen] = None
        self.session: Optional[int] = None  # dlwatch's own session, to sweep at the end (act.own_session)
        self.control: Optional[JobControl] = None  # the terminal, shared with the job once it started
        self.watcher: Optional[NodeLoop] = None
        self.outcome = Outcome()
        self.bounded = bool(args.stop_after_batches or args.stop_after_s or args.summary_json)
        self.bound: Optional[RunBound] = None  # made when watching starts

    def run(self) -> int:
        """Every phase in order: catch signals, start the job, reap it and forward signals on two
        threads, watch it, then after its end diagnose, clean up, say how it ended and write the
        summary. The job's exit code (128 + N after signal N); 124 (:attr:`Exit.TERMINATED`) when
        dlwatch ended it as hung; 0 when it was ended at its bound; 126/127 when it could not start.

        Raises:
            ConfigError: the metrics port cannot be served (before the job starts).
        """
        if not self.cmd[0]:
            log("cannot start '': command not found")
            return Exit.NOT_FOUND
        self.catch_signals()
        failed = self.spawn()
        if failed is not None:
            return failed
        self.start_threads()
        self.watch()
        self.ended.wait()
        if self.tail:
            self.tail.wait(_STDERR_DRAIN_S)
        code = self.exit_code()
        self.after_exit(code)
        self.clean_up()
        written = self.watcher.outcome.reports if self.watcher is not None else []
        self.say_end(code, written)
        self.write_summary(code, written)
        if self.outcome.stopped:
            return Exit.TERMINATED if self.outcome.stopped == "hung" else Exit.OK
        return Exit.TERMINATED if self.outcome.terminated else code

    # --- signals --------------------------------------------------------------------------

    def on_signal(self, signum, _frame) -> None:
        """A caught signal: kept for the forwarder, which sends it once the job exists."""
        self.pending.append(signum)  # handlers only enqueue and write to a self-pipe; a thread forwards
        self.received.append(signum)
        self.forward_wake.set()
        self.wake.set()

    def catch_signals(self) -> None:
        """Before the job exists: a signal from now on is kept and forwarded once it does (no
        window in which SIGTERM would kill dlwatch and leave the job running unwatched)."""
        for sig in FORWARDED:
            signal.signal(sig, self.on_signal)

    # --- start ----------------------------------------------------------------------------

    def spawn(self) -> Optional[int]:
        """Serve metrics, make the inside view's folder, capture stderr and start the job in
        its own process group (in our session: terminal signals reach dlwatch, which forwards
        them), handing it the terminal. ``None``, or the exit code when the job could not be
        started (everything made so far removed).

        Raises:
            ConfigError: the metrics port cannot be served.
        """
        cfg = self.cfg
        self.session = act.own_session()  # before anything of ours starts
        group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
        self.server, self.collector = start_metrics(cfg, *metrics_origin(self.args))
        self.folder, self.reader = _hook_folder(cfg)
        folder = self.folder
        env = inside.hook_env(os.environ, folder.path, os.getpid(), cfg.data_checks) if folder else None
        redact.learn(env if env is not None else os.environ)  # its secret values: hidden wherever they appear later
        self.tail = tail = _start_stderr_tail(cfg, [folder.path] if folder else [])
        search = (env or os.environ).get("PATH", os.defpath)
        # The first executable of that name on PATH, as bash runs it: Python's own search would go
        # on to a later PATH folder when the first one's #! interpreter is missing (ENOENT), and run
        # another program of the same name. argv[0] stays as the user typed it.
        cmd = self.cmd
        program = cmd[0] if "/" in cmd[0] else shutil.which(cmd[0], path=search) or cmd[0]
        try:
            self.proc = subprocess.Popen(
                cmd, executable=program, stderr=tail.job_stderr if tail else None, env=env, **group
            )
        except OSError as e:
            why, code = start_failure(cmd[0], e, search)
            log(f"cannot start {cmd[0]!r}: {why}")
            if tail:
                tail.close_job_end()
                tail.wait(_STDERR_DRAIN_S)
                tail.cleanup()
            self.remove_folder()
            self.stop_metrics()
            return code
        if tail:
            tail.close_job_end()
        self.control = JobControl(log)
        self.control.hand_over(self.proc.pid)
        return None

    # --- the job's two threads ------------------------------------------------------------

    def start_threads(self) -> None:
        """The job's reaper and the signal forwarder, daemon threads."""
        threading.Thread(target=self.reap, name="job-waiter", daemon=True).start()
        threading.Thread(target=self.forward, name="signal-forwarder", daemon=True).start()

    def reap(self) -> None:
        """Wait for the job (the only thread that reaps it), take the terminal back, and wake
        the watch loop and the forwarder."""
        proc, control = self.proc, self.control
        assert proc is not None and control is not None
        try:
            proc.returncode = wait_job(proc.pid, control)
        except ChildProcessError:  # never: only this thread reaps the job
            proc.wait()
        control.restore()
        self.ended.set()
        self.wake.set()
        self.forward_wake.set()

    def forward(self) -> None:
        """Send each caught signal to the job's process group until it ended. Its own thread,
        so a signal reaches the job at once, even while the loop examines a stall (py-spy
        dumps take seconds)."""
        proc = self.proc
        assert proc is not None
        while True:
            while self.pending:
                # to its group only while it is unreaped: the group's number is still its own
                children.signal_group(proc, self.pending.pop(0))
            if self.ended.is_set():
                return
            self.forward_wake.wait(0.5)

    # --- watching -------------------------------------------------------------------------

    def watch(self) -> None:
        """Watch the job until it ends or the run's bound is reached (then end it). An error of
        the watchdog's own is said and watching stops: the job outlives it."""
        proc = self.proc
        assert proc is not None
        if self.bounded:
            self.bound = RunBound(self.args.stop_after_batches, self.args.stop_after_s, time.monotonic())
        tail = self.tail
        try:
            job = WatchedJob(
                proc.pid,
                proc.pid,
                self.ended.is_set,
                stderr_tail=tail.text if tail else str,
                cmdline=tuple(self.cmd),
                inside=self.reader,
                launch=Launch(tuple(self.cmd), os.getcwd(), os.getuid(), "run", *launch_context()),
                # dlwatch leads its session and is alone in it: the job is all it will start
                # there (its helpers get their own sessions)
                own_session=self.session,
            )
            self.watcher = watcher = NodeLoop(self.cfg, job, self.wake)
            attach_metrics(self.collector, watcher)
            self.outcome = watcher.run(_bounded(watcher, self.bound) if self.bound else lambda: None)
            if self.outcome.stopped:
                log(f"the run reached its bound ({self.outcome.stopped}): ending the job")
                log(watcher.job.end_job())
        except Exception as e:  # the job must outlive the watchdog's own failure
            log(f"internal error, no longer watching: {e!r}")

    # --- after the job's end --------------------------------------------------------------

    def exit_code(self) -> int:
        """The job's exit code (128 + N after signal N). A job that owned the terminal and was
        ended by its Ctrl-C or Ctrl-\\ counts as signalled by it (it reached the job straight;
        a job that catches KeyboardInterrupt exits 130 itself)."""
        proc, control = self.proc, self.control
        assert proc is not None and proc.returncode is not None and control is not None
        code = _exit_code_of(proc.returncode)
        interrupted = {-signal.SIGINT: signal.SIGINT, -signal.SIGQUIT: signal.SIGQUIT}
        interrupted.update({of_signal(signal.SIGINT): signal.SIGINT, of_signal(signal.SIGQUIT): signal.SIGQUIT})
        if control.handed and proc.returncode in interrupted and not self.received:
            self.received.append(interrupted[proc.returncode])
        return code

    def after_exit(self, code: int) -> None:
        """The watcher's look at the job's end (crash diagnosis, alerts)."""
        if self.watcher is None:
            return
        received = self.received
        before = len(received)  # a signal from now on cuts the wait for alert commands short
        self.watcher.after_exit(
            code,
            terminated=self.outcome.terminated or bool(self.outcome.stopped),  # its end is dlwatch's doing, no crash
            signalled=received[0] if received else None,
            interrupted=lambda: len(received) > before,
        )

    def clean_up(self) -> None:
        """Remove the stderr capture, the inside view's folder and stop serving metrics."""
        if self.tail:
            self.tail.cleanup()
        self.remove_folder()
        self.stop_metrics()

    def remove_folder(self) -> None:
        """Remove the inside view's folder, when one was made."""
        if self.folder:
            inside.remove_folder(self.folder)

    def stop_metrics(self) -> None:
        """Stop the metrics endpoint, when one is served."""
        if self.server is not None:
            self.server.shutdown()

    def say_end(self, code: int, written: List[str]) -> None:
        """The last word, after whatever the job printed while it went down: how it ended and
        the last report, when there is a report or dlwatch ended it."""
        outcome = self.outcome
        if not (written or outcome.terminated or outcome.stopped):
            return
        what = (
            "ended the hung job (exit 124)"
            if outcome.terminated
            else f"ended the job at its bound ({outcome.stopped}; its exit code {code})"
            if outcome.stopped
            else f"the job exited with code {code}"
        )
        log(
            f"{what}; {len(written)} report(s), the last: {os.path.join(written[-1], 'report.txt')}"
            if written
            else what
        )

    def write_summary(self, code: int, written: List[str]) -> None:
        """``--summary-json``: the run's figures, or one line saying why they could not be written."""
        if self.bound is None or not self.args.summary_json:
            return
        try:
            writer.write_json(
                self.args.summary_json, self.bound.summary(code, self.outcome.stopped, written, time.monotonic())
            )
        except ReportWriteError as e:
            log(f"--summary-json: {e}")


def _exit_code_of(returncode: int) -> int:
    return of_signal(-returncode) if returncode < 0 else returncode


def _start_stderr_tail(cfg: config_mod.Config, orphan_cleanup=()) -> Optional[StderrTail]:
    """The stderr pass-through with its kept tail, or ``None`` (the job's stderr then is ours,
    untouched): when ``stderr_tail_bytes`` is 0, when our stderr is closed, or when the pump
    cannot start."""
    if not cfg.stderr_tail_bytes:
        return None
    try:
        os.fstat(2)
        return StderrTail(2, cfg.stderr_tail_bytes, orphan_cleanup)
    except OSError as e:
        if e.errno != errno.EBADF:
            log(f"cannot capture the job's stderr ({e.strerror}); crash diagnosis from stderr is off")
        return None


def _hook_folder(cfg: config_mod.Config) -> Tuple[Optional[inside.HookFolder], inside.InsideReader]:
    """``(folder, reader)`` for the inside view of a job ``dlwatch run`` starts: a new private
    folder, or ``(None, reader saying why not)`` with ``hook: false`` or when it cannot be made."""
    if not cfg.hook:
        return None, inside.InsideReader(None, "no inside view (hook: false / --no-hook)")
    try:
        folder = inside.make_folder()
    except OSError as e:
        log(f"no inside view: cannot create its folder ({e.strerror}); watching from outside only")
        return None, inside.InsideReader(None, f"no inside view (its folder could not be created: {e.strerror})")
    return folder, inside.InsideReader(folder.path, retire=True)


def _bounded(watcher: NodeLoop, bound: RunBound) -> Callable[[], Optional[str]]:
    """The ``until`` of a bounded run (:meth:`NodeLoop.run`): counts the batches of the
    job watcher's latest sample and hears of hang reports (chained to ``on_report``)."""
    previous = watcher.on_report

    def on_report(written: ReportWritten) -> None:
        previous(written)
        bound.reported(written)

    watcher.on_report = on_report

    def until() -> Optional[str]:
        bound.note(watcher.job.status().sample)
        return bound.reached(time.monotonic())

    return until


def _shown(text: str) -> str:
    """``text`` as is, or quoted when it has a space or an unprintable character (a CR from a
    script saved with Windows line ends: ``'/bin/bash\\r'``)."""
    return text if text and text.isprintable() and not any(c.isspace() for c in text) else repr(text)


def _interpreter(path: str) -> Optional[str]:
    """The interpreter a script's ``#!`` line names (as the kernel reads it: the first word
    after ``#!``, a trailing CR kept), or ``None`` when it has none or cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].replace(b"\t", b" ").split(b" ")
    word = next((w for w in words if w), b"")
    return os.fsdecode(word) if word else None


def start_failure(program: str, error: OSError, path: str) -> Tuple[str, int]:
    """What to say, and the exit code, when ``program`` could not be started with ``error``,
    as bash says it: 127 (:attr:`Exit.NOT_FOUND`) when it, or the interpreter its ``#!`` line
    names, does not exist (``bad interpreter /usr/bin/python9: No such file or directory``);
    126 (:attr:`Exit.CANNOT_EXECUTE`) when it exists but cannot be executed. ``path`` is the
    ``PATH`` it was looked for in when it has no ``/``."""
    found = program if "/" in program else shutil.which(program, path=path)
    if isinstance(error, FileNotFoundError):
        if not found or not os.path.isfile(found):
            return ("No such file or directory" if "/" in program else "command not found"), Exit.NOT_FOUND
        interp = _interpreter(found)  # it exists, yet exec said ENOENT: what it needs does not
        if interp is None:
            return "cannot execute: required file not found (its dynamic loader)", Exit.NOT_FOUND
        if not os.path.exists(interp):
            return f"bad interpreter {_shown(interp)}: No such file or directory", Exit.NOT_FOUND
        return f"cannot execute: required file not found (by its interpreter {_shown(interp)})", Exit.NOT_FOUND
    why = error.strerror or str(error)
    if isinstance(error, PermissionError) and found and os.access(found, os.X_OK):
        interp = _interpreter(found)  # executable itself: its interpreter is what cannot be run
        if interp is not None:
            return f"bad interpreter {_shown(interp)}: {why}", Exit.CANNOT_EXECUTE
    return why, Exit.CANNOT_EXECUTE
