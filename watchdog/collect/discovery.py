"""Find the job's main process and its DataLoader workers, and give each process a role.

Workers are recognised by PyTorch's process name (``pt_data_worker``, torch >= 2.5,
pytorch/pytorch#128448); their start method by how multiprocessing starts them: under ``fork``
a child of main with main's command line; under ``spawn`` a child running
``multiprocessing.spawn``; under ``forkserver`` a child of the forkserver process
(``multiprocessing.forkserver``). On torch < 2.5 (no names) only fork workers are found while
sampling; roles are confirmed from stacks at report time (``_worker_loop``).
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import psutil

from .. import frames
from ..errors import NoSuchTarget, NotPython, TargetAccessDenied, TargetError
from ..types import ROLE_FORKSERVER, ROLE_MAIN, ROLE_OTHER, ROLE_WORKER


def is_python(proc: psutil.Process) -> bool:
    """True when ``proc`` runs a Python interpreter: its executable is named python*/pypy*, its
    name is one PyTorch gives Python processes, or it maps a libpython.

    Raises:
        psutil.NoSuchProcess, psutil.AccessDenied: as psutil does.
    """
    name = proc.name()
    if name in frames.MAIN_COMMS or name in frames.WORKER_COMMS:
        return True
    try:
        exe = os.path.basename(proc.exe())
    except (psutil.AccessDenied, psutil.ZombieProcess):
        exe = ""
    if exe.startswith(("python", "pypy")) or name.startswith(("python", "pypy")):
        return True
    try:
        with open(f"/proc/{proc.pid}/maps", encoding="utf-8", errors="replace") as f:
            return any("libpython" in line for line in f)
    except OSError:
        return False


def _tgid(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def check_target(pid: int) -> psutil.Process:
    """The process ``pid``, checked to exist, be readable and run Python (``attach``).

    Raises:
        TargetError: not a positive PID, dlwatch's own PID, or a thread ID.
        NoSuchTarget: no such process (or a zombie).
        TargetAccessDenied: this user cannot read it.
        NotPython: it is not a Python interpreter.
    """
    if pid <= 0:
        raise TargetError(pid, "not a process ID (must be a positive integer)")
    if pid == os.getpid():
        raise TargetError(pid, "that is dlwatch itself")
    tgid = _tgid(pid)
    if tgid is not None and tgid != pid:
        raise TargetError(pid, f"a thread of process {tgid}, not a process; use --pid {tgid}")
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            raise NoSuchTarget(pid)
        proc.num_threads()
        proc.num_fds()  # needs ptrace-read access, as /proc/PID/io, wchan and py-spy do
        if not is_python(proc):
            try:
                exe = proc.exe() or proc.name()
            except psutil.Error:
                exe = proc.name()
            raise NotPython(pid, exe)
        return proc
    except psutil.NoSuchProcess:
        raise NoSuchTarget(pid) from None
    except psutil.AccessDenied:
        raise TargetAccessDenied(pid) from None


def find_main(root: psutil.Process) -> Optional[psutil.Process]:
    """The job's main Python process: ``root`` itself when it runs Python, else the first
    Python process in a breadth-first walk of its descendants (``dlwatch run -- bash -c …``).
    ``None`` while there is none."""
    queue = [root]
    while queue:
        proc = queue.pop(0)
        try:
            if is_python(proc):
                return proc
            queue.extend(proc.children())
        except psutil.Error:
            continue
    return None


def _cmdline(proc: psutil.Process) -> Tuple[str, ...]:
    try:
        return tuple(proc.cmdline())
    except psutil.Error:
        return ()


def classify(main: psutil.Process) -> List[Tuple[psutil.Process, str, Optional[str]]]:
    """``(process, role, start_method)`` for main and every descendant, main first.

    ``start_method`` is ``fork``/``spawn``/``forkserver`` for workers, else ``None``.
    Processes that vanish during the walk are left out. Cost: about 1 ms.
    """
    out: List[Tuple[psutil.Process, str, Optional[str]]] = [(main, ROLE_MAIN, None)]
    try:
        descendants = main.children(recursive=True)
    except psutil.Error:
        return out
    main_cmd = _cmdline(main)
    forkservers: Dict[int, bool] = {}
    for proc in descendants:
        try:
            name, ppid = proc.name(), proc.ppid()
        except psutil.Error:
            continue
        cmd = _cmdline(proc)
        joined = " ".join(cmd)
        if "multiprocessing.forkserver" in joined:
            forkservers[proc.pid] = True
            out.append((proc, ROLE_FORKSERVER, None))
            continue
        if "multiprocessing.resource_tracker" in joined or "torch_shm_manager" in joined:
            out.append((proc, ROLE_OTHER, None))
            continue
        if ppid in forkservers:
            method = "forkserver"
        elif "multiprocessing.spawn" in joined or "spawn_main" in joined:
            method = "spawn"
        elif ppid == main.pid and cmd == main_cmd:
            method = "fork"
        else:
            method = None
        # torch >= 2.5 names its workers; without the name only a fork child with main's command
        # line is taken for one (torch < 2.5): a spawned child may be anything (a distributed
        # peer, a Pool), and would pass its own wake-ups off as the loader's progress.
        if name in frames.WORKER_COMMS or (method == "fork" and ppid == main.pid):
            out.append((proc, ROLE_WORKER, method or "fork"))
        else:
            out.append((proc, ROLE_OTHER, None))
    return out
