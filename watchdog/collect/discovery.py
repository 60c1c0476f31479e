"""Find the job's main process and its DataLoader workers, and give each process a role, once.

Roles (decided here, before anything is diagnosed; ``watchdog.types``):

* ``main`` — the job's main Python process;
* ``dataloader_worker`` — a process PyTorch named ``pt_data_worker`` (torch >= 2.5,
  pytorch/pytorch#128448), whatever its start method: under ``fork`` a child of main with main's
  command line, under ``spawn`` a child running ``multiprocessing.spawn``, under ``forkserver``
  a child of the forkserver process (``multiprocessing.forkserver``). On torch < 2.5, which
  names no process, a fork child of main with main's command line is taken for one;
* ``worker_starting`` — an unnamed spawn or forkserver child (or a fork child a moment old)
  that is still starting: a spawned worker re-imports torch for seconds before it is named;
* ``worker_child`` — any descendant of a worker (an ffmpeg-style decoder started by
  ``subprocess.run`` in ``__getitem__``): the worker progresses when it does;
* ``forkserver`` — the forkserver process itself;
* ``other`` — everything else: a plain ``multiprocessing.Process`` (a summary writer), the
  resource tracker, ``torch_shm_manager``, an unnamed child older than the start window.

Children are found from the parents' own ``/proc/PID/task/TID/children`` files (one per
thread; ``CONFIG_PROC_CHILDREN``, Documentation/filesystems/proc.rst), never by scanning all of
``/proc``, except on a kernel without those files (psutil's ``children()``, which reads every
process's ``stat``). :func:`decide_role` is the one rule; the sampler applies it at each tick to
facts it keeps per ``(pid, create time)`` (:class:`~watchdog.collect.sampler.Sampler`).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Callable, Collection, Dict, List, NamedTuple, Optional, Sequence, Tuple

import psutil

from .. import frames, redact
from ..errors import NoSuchTarget, NotPython, TargetAccessDenied, TargetError
from ..text import one_line
from ..types import (
    ROLE_FORKSERVER,
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_STARTING,
    ROLE_WORKER,
    ROLE_WORKER_CHILD,
    ProcId,
)
from . import procfs


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
    tgid = procfs.status_field(procfs.read_bytes(f"/proc/{pid}/status") or b"", "Tgid")
    return int(tgid) if tgid is not None and tgid.isdigit() else None


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
            raise NotPython(pid, one_line(exe), python_children(proc))
        return proc
    except psutil.NoSuchProcess:
        raise NoSuchTarget(pid) from None
    except psutil.AccessDenied:
        raise TargetAccessDenied(pid) from None


# The most processes python_children visits, and the most it names.
_WALK_LIMIT, _CHILDREN_NAMED = 256, 4


def python_children(proc: psutil.Process) -> List[Tuple[int, str]]:
    """The Python processes ``proc`` started (a launcher shell's ``python train.py``, through
    shells and other non-Python launchers below it; never below a Python process, whose
    children are its workers; never dlwatch itself), breadth first: ``(pid, command line)``,
    the command line redacted (:func:`watchdog.redact.cmdline`), its program by its base name,
    on one printable line of at most 80 characters. At most :data:`_CHILDREN_NAMED`, of at most :data:`_WALK_LIMIT`
    processes visited; processes that end meanwhile are left out."""
    found: List[Tuple[int, str]] = []
    queue, seen = [proc], 0
    while queue and seen < _WALK_LIMIT and len(found) < _CHILDREN_NAMED:
        parent = queue.pop(0)
        try:
            kids = children(parent)
        except psutil.Error:
            continue
        for child in kids:
            seen += 1
            try:
                if not is_python(child):
                    queue.append(child)
                    continue
                args = _cmdline(child)
                if is_dlwatch(args):
                    continue
                args = (os.path.basename(args[0]), *args[1:]) if args else args  # python3, not /usr/bin/python3
                shown = one_line(" ".join(" ".join(redact.cmdline(args)).split())) or _name(child)
                found.append((child.pid, shown if len(shown) <= 80 else shown[:77] + "..."))
            except psutil.Error:
                continue
    return found[:_CHILDREN_NAMED]


def has_loaded_torch(pid: int) -> Optional[bool]:
    """Whether ``pid`` has PyTorch's C++ library mapped (a ``libtorch`` file in
    ``/proc/PID/maps``: ``import torch`` loads it); ``None`` when the maps cannot be read."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return b"libtorch" in f.read()
    except OSError:
        return None


def children(proc: psutil.Process) -> List[psutil.Process]:
    """The children of ``proc``: from its threads' ``children`` files
    (:func:`watchdog.collect.procfs.children_of`), or psutil's ``children()`` (a scan of all of
    ``/proc``) on a kernel without them. Children that end meanwhile are left out.

    Raises:
        psutil.NoSuchProcess: ``proc`` is gone (psutil's scan only; the files give no children).
    """
    pids = procfs.children_of(proc.pid)
    if pids is None:
        return proc.children()
    out = []
    for pid in dict.fromkeys(pids):
        try:
            out.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return out


def _child_comms(proc: psutil.Process) -> Dict[int, str]:
    """``{pid: comm}`` of the children of ``proc`` (``/proc/PID/stat``'s comm, at most 15
    bytes, which every name in ``frames.WORKER_COMMS`` that psutil could ever report fits), read
    without a psutil object per child; psutil's scan on a kernel without ``children`` files.

    Raises:
        psutil.NoSuchProcess: ``proc`` is gone (psutil's scan only).
    """
    pids = procfs.children_of(proc.pid)
    if pids is None:
        return {c.pid: _name(c) for c in proc.children()}
    out = {}
    for pid in dict.fromkeys(pids):
        st = procfs.proc_stat(pid)
        if st is not None:
            out[pid] = st.comm
    return out


def is_dlwatch(cmdline: Sequence[str]) -> bool:
    """Whether a command line is dlwatch's own (``dlwatch …``, ``python -m watchdog …``, its
    stderr pump ``python -I -m watchdog.collect.stderr_tail``): a wrapper, never the job. The
    probes' jobs (``python -m watchdog.probes.train`` once installed) are jobs."""
    args = list(cmdline[:4])
    if any(os.path.basename(a) == "dlwatch" for a in args[:2]):
        return True
    return any(
        a == "-m" and b.split(".")[0] == "watchdog" and b.split(".")[:2] != ["watchdog", "probes"]
        for a, b in zip(args, args[1:])
    )


def find_main(root: psutil.Process) -> Optional[psutil.Process]:
    """The job's main Python process: ``root`` itself when it runs Python, else the first
    Python process in a breadth-first walk of its descendants (``dlwatch run -- bash -c …``).
    A dlwatch inside the job (``dlwatch run -- dlwatch run -- python …``) is a wrapper like a
    shell: its job is the main. ``None`` while there is none."""
    queue = [root]
    while queue:
        proc = queue.pop(0)
        try:
            if is_python(proc) and not is_dlwatch(_cmdline(proc)):
                return proc
            queue.extend(children(proc))
        except psutil.Error:
            continue
    return None


# Environment variables that torchrun (torch/distributed/elastic/agent/server/api.py) and most
# launchers set for each rank; ``RANK`` marks a training process.
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID")
# What other launchers set instead (NOTE [ Ranks as launchers set them ]): Open MPI's mpirun
# (https://docs.open-mpi.org/en/main/tuning-apps/environment-var.html), Slurm's srun (srun(1),
# "OUTPUT ENVIRONMENT VARIABLES"), and a launcher that starts the script again with
# ``LOCAL_RANK`` and ``NODE_RANK`` (PyTorch Lightning's ``strategy="ddp"``:
# lightning/fabric/strategies/launchers/subprocess_script.py, ``_call_children_scripts``).
_OMPI_VARS = {
    "OMPI_COMM_WORLD_RANK": "RANK",
    "OMPI_COMM_WORLD_SIZE": "WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK": "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "LOCAL_WORLD_SIZE",
}
_SLURM_VARS = {
    "SLURM_PROCID": "RANK",
    "SLURM_LOCALID": "LOCAL_RANK",
    "SLURM_NODEID": "GROUP_RANK",
}
_SLURM_WORLD = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")  # the step's task count first
LAUNCHER_VARS = RANK_VARS + ("NODE_RANK", "SLURM_STEP_ID") + tuple(_OMPI_VARS) + tuple(_SLURM_VARS) + _SLURM_WORLD
# RANK_SOURCE of each way a rank was named (the report's job.rank says which; not a launcher's variable).
SOURCE_OMPI = "OMPI_COMM_WORLD_RANK (Open MPI's mpirun)"
SOURCE_SLURM = "SLURM_PROCID (a task of Slurm's srun)"
SOURCE_RELAUNCH = "NODE_RANK and LOCAL_RANK (a launcher that started the script again, as Lightning's ddp)"
SOURCE_RELAUNCHER = "the process that started LOCAL_RANK 1 and up again (its LOCAL_RANK 0, as Lightning's ddp)"
SOURCE_HELPER = "a process the job started with multiprocessing, alone: not a rank"

# NOTE [ Ranks as launchers set them ]
# A rank's identity is read from the environment its launcher gave it (/proc/PID/environ: what
# the process started with, never what it set since), in this order, the first that applies:
# * ``RANK``: torchrun, accelerate, deepspeed, or the job itself; kept as set (RANK_VARS).
# * ``OMPI_COMM_WORLD_RANK``: mpirun; SIZE, LOCAL_RANK and LOCAL_SIZE with it.
# * ``LOCAL_RANK`` with ``NODE_RANK`` and no ``RANK``: a launcher that starts the script again
#   for local ranks 1 and up (Lightning's ``strategy="ddp"``); the script's first process is local
#   rank 0 and has none of them (it set them in ``os.environ`` after it started). The global
#   rank is NODE_RANK x (local ranks on the node) + LOCAL_RANK, the local ranks counted as the
#   processes that one process started again plus itself, or LOCAL_WORLD_SIZE where set.
# * ``SLURM_PROCID`` with ``SLURM_STEP_ID``: a task of ``srun``; a batch script (SLURM_PROCID 0,
#   no step id) is no rank, nor is a special step (its id is over 9 digits). WORLD_SIZE from
#   SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), LOCAL_RANK from SLURM_LOCALID, GROUP_RANK from
#   SLURM_NODEID.
# Inner launchers come first: ``srun torchrun …`` ranks are torchrun's, Lightning's re-launch
# inside a batch allocation is Lightning's. Every value must be a decimal integer (the job sets
# them; RANK names a report folder); a process whose source has an invalid rank is no rank.


# What a rank variable may hold: a decimal integer (torch.distributed's env:// rendezvous reads
# them with int(); torch/distributed/rendezvous.py, _env_rendezvous_handler), or for
# TORCHELASTIC_RUN_ID a name (torchrun's --rdzv-id: a Slurm job id, a Kubernetes job name, a
# user@host, a path-like name). RANK names report folders; the run id only labels metrics and
# is queried by `dlwatch cluster`: no space, quote or backslash, nothing else is let through.
_RANK_VALUE = re.compile(r"[0-9]{1,9}\Z")
RUN_ID_VALUE = re.compile(r"[A-Za-z0-9_.:@/+=-]{1,128}\Z")


def launcher_env(pid: int) -> Optional[Dict[str, str]]:
    """The launchers' variables (``LAUNCHER_VARS``) in ``/proc/PID/environ`` whose values are
    valid (decimal integers; ``TORCHELASTIC_RUN_ID`` a plain name), or ``None`` when unreadable.
    The job sets them: any other value is left out."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    env = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        name = key.decode("ascii", "replace")
        if sep and name in LAUNCHER_VARS:
            text = value.decode("utf-8", "replace")
            if (RUN_ID_VALUE if name == "TORCHELASTIC_RUN_ID" else _RANK_VALUE).match(text):
                env[name] = text
    return env


def relaunched(env: Dict[str, str]) -> bool:
    """Whether ``env`` (:func:`launcher_env`) is that of a process a launcher started again
    as local rank 1 and up (``LOCAL_RANK`` and ``NODE_RANK``, no ``RANK`` nor Open MPI's)."""
    return "LOCAL_RANK" in env and "NODE_RANK" in env and "RANK" not in env and "OMPI_COMM_WORLD_RANK" not in env


def derive_rank(env: Dict[str, str], local_world: Optional[int] = None) -> Optional[Dict[str, str]]:
    """The rank variables of a process whose launchers' variables are ``env``
    (:func:`launcher_env`), read as NOTE [ Ranks as launchers set them ] says: torchrun's as
    they are, another launcher's translated to ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``GROUP_RANK``, ``LOCAL_WORLD_SIZE`` with ``RANK_SOURCE`` naming it. ``local_world`` is the
    number of local ranks of a re-launched process's node (counted by :func:`find_ranks`),
    needed where ``NODE_RANK`` is not 0 and ``LOCAL_WORLD_SIZE`` is not set. ``None``: no rank."""
    if "RANK" in env:
        return {k: env[k] for k in RANK_VARS if k in env}
    if "OMPI_COMM_WORLD_RANK" in env:
        out = {mine: env[theirs] for theirs, mine in _OMPI_VARS.items() if theirs in env}
        return {**out, "RANK_SOURCE": SOURCE_OMPI}
    if relaunched(env):
        node, local = int(env["NODE_RANK"]), int(env["LOCAL_RANK"])
        per_node = int(env["LOCAL_WORLD_SIZE"]) if "LOCAL_WORLD_SIZE" in env else local_world
        if node and not per_node:
            return None
        out = {"RANK": str(node * (per_node or 0) + local), "LOCAL_RANK": str(local), "GROUP_RANK": str(node)}
        out.update({k: env[k] for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE") if k in env})
        return {**out, "RANK_SOURCE": SOURCE_RELAUNCH}
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        out = {mine: env[theirs] for theirs, mine in _SLURM_VARS.items() if theirs in env}
        world = next((env[k] for k in _SLURM_WORLD if k in env), None)
        if world is not None:
            out["WORLD_SIZE"] = world
        return {**out, "RANK_SOURCE": SOURCE_SLURM}
    return None


def rank_env(pid: int, local_world: Optional[int] = None) -> Optional[Dict[str, str]]:
    """The rank variables of process ``pid`` (:func:`derive_rank` of its :func:`launcher_env`),
    else ``None`` (also when unreadable). The job sets them: a value that is not a decimal
    integer (``TORCHELASTIC_RUN_ID``: a plain name) is left out, and without a valid rank the
    process is no rank (``RANK='0/x'`` never reaches a folder name)."""
    env = launcher_env(pid)
    return None if env is None else derive_rank(env, local_world)


def find_ranks(
    root: psutil.Process, loader_owners: Collection[int] = ()
) -> List[Tuple[psutil.Process, Dict[str, str]]]:
    """The job's training ranks, with their rank variables, in tree order: the topmost Python
    processes of the tree that a launcher named a rank (:func:`rank_env`: torchrun's workers,
    mpirun's, srun's tasks, a launcher's ranks), with a script that started itself again for
    its other local ranks (:func:`relaunched`) counted as their local rank 0; and the topmost
    processes below the job's main that own a DataLoader iterator (``loader_owners``, from the
    inside view) or have children PyTorch named as DataLoader workers (torch >= 2.5, without
    the inside view): ranks started by ``torch.multiprocessing.spawn``, which sets no variable;
    numbered by start order, as ``spawn`` starts them, and marked ``RANK_SOURCE=start order``.
    One such process alone, with no sibling started the same way, is a helper the job started
    with ``multiprocessing`` (an evaluation, a test's child), not "rank 0 of 1": it is watched
    as ``RANK=child<PID>`` (``RANK_SOURCE``: :data:`SOURCE_HELPER`). Their descendants
    (DataLoader workers inherit ``RANK``) belong to them; a process PyTorch named as a
    DataLoader worker is never a rank. Empty for a single-process job."""
    out: List[Tuple[psutil.Process, Dict[str, str]]] = []
    again: List[Tuple[psutil.Process, Dict[str, str]]] = []  # started again by a launcher (relaunched)
    spawned: List[psutil.Process] = []
    main = find_main(root)
    queue: List[Tuple[int, Optional[psutil.Process]]] = [(root.pid, root)]
    while queue:
        pid, known = queue.pop(0)
        try:
            proc = known or psutil.Process(pid)
            if proc.name() in frames.WORKER_COMMS:
                continue
            raw = launcher_env(proc.pid) if is_python(proc) else None
            if raw is not None and relaunched(raw):
                again.append((proc, raw))
                continue
            env = derive_rank(raw) if raw is not None else None
            if env is not None:
                out.append((proc, env))
                continue
            kids = _child_comms(proc)
            owns_workers = any(comm in frames.WORKER_COMMS for comm in kids.values())
            # The forkserver is the parent of the workers it forks, not their owner (the process
            # whose iterator asked for them): never a rank; ranks it forked are found below it.
            forkserver = "multiprocessing.forkserver" in " ".join(_cmdline(proc))
            if (
                main is not None
                and proc.pid != main.pid
                and not forkserver
                and (proc.pid in loader_owners or owns_workers)
            ):
                spawned.append(proc)
                continue
            # DataLoader workers are never ranks, nor is anything below them: not walked.
            queue.extend((c, None) for c, comm in kids.items() if comm not in frames.WORKER_COMMS)
        except psutil.Error:
            continue
    if again:
        out = _with_relauncher(out, again)
    if spawned and not out:
        spawned = _with_spawned_siblings(spawned)
        spawned.sort(key=lambda p: (p.create_time(), p.pid))
        if len(spawned) == 1:
            out = [(spawned[0], {"RANK": f"child{spawned[0].pid}", "RANK_SOURCE": SOURCE_HELPER})]
        else:
            out = [
                (p, {"RANK": str(i), "WORLD_SIZE": str(len(spawned)), "RANK_SOURCE": "start order"})
                for i, p in enumerate(spawned)
            ]
        if main is not None and main.pid in loader_owners:
            out.insert(0, (main, {"RANK": "main", "RANK_SOURCE": "the job's main process"}))
    return out


def _with_relauncher(
    out: List[Tuple[psutil.Process, Dict[str, str]]], again: List[Tuple[psutil.Process, Dict[str, str]]]
) -> List[Tuple[psutil.Process, Dict[str, str]]]:
    """``out`` with the processes a launcher started again (``again``: each with its
    :func:`launcher_env`) named by :func:`derive_rank`, and the Python process that started
    them (their parent, when it is no rank already and not dlwatch) as their node's local rank
    0, placed before them (NOTE [ Ranks as launchers set them ])."""
    by_parent: Dict[int, List[Tuple[psutil.Process, Dict[str, str]]]] = {}
    for proc, raw in again:
        by_parent.setdefault(_ppid(proc), []).append((proc, raw))
    named = {proc.pid for proc, _ in out}
    result = list(out)
    for ppid, group in by_parent.items():
        local_world = len(group) + 1
        ranks = [(proc, env) for proc, raw in group if (env := derive_rank(raw, local_world)) is not None]
        if not ranks:
            continue
        first = ranks[0][1]
        try:
            parent: Optional[psutil.Process] = psutil.Process(ppid) if ppid > 0 and ppid not in named else None
            if parent is not None and (not is_python(parent) or is_dlwatch(_cmdline(parent))):
                parent = None
        except psutil.Error:
            parent = None
        if parent is not None:
            node = int(first["GROUP_RANK"])
            per_node = int(first.get("LOCAL_WORLD_SIZE", local_world))
            zero = {"RANK": str(node * per_node), "LOCAL_RANK": "0", "GROUP_RANK": str(node)}
            zero.update({k: first[k] for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE") if k in first})
            result.append((parent, {**zero, "RANK_SOURCE": SOURCE_RELAUNCHER}))
            named.add(parent.pid)
        result.extend(ranks)
    return result


def _ppid(proc: psutil.Process) -> int:
    try:
        return proc.ppid()
    except psutil.Error:
        return 0


def _with_spawned_siblings(found: List[psutil.Process]) -> List[psutil.Process]:
    """``found`` plus their siblings that ``multiprocessing`` started the same way (spawn or
    forkserver children, not DataLoader workers): the ranks of one ``torch.multiprocessing.spawn``
    call, including those whose loaders are already done or not yet started."""
    out = {p.pid: p for p in found}
    for p in found:
        try:
            parent = p.parent()
            siblings = children(parent) if parent is not None else []
        except psutil.Error:
            continue
        for sib in siblings:
            line = " ".join(_cmdline(sib))
            if (
                sib.pid not in out
                and _name(sib) not in frames.WORKER_COMMS
                and ("spawn_main" in line or "--multiprocessing-fork" in line)
            ):
                out[sib.pid] = sib
    return list(out.values())


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return ""


def _cmdline(proc: psutil.Process) -> Tuple[str, ...]:
    try:
        return tuple(proc.cmdline())
    except psutil.Error:
        return ()


# Seconds a spawn/forkserver child may take to become a named worker (importing torch under
# load); a fork worker renames itself within milliseconds of the fork.
WORKER_START_WINDOW_S = 60.0
FORK_RENAME_WINDOW_S = 3.0
_TORCH_VERSION = re.compile(r"""^__version__\s*=\s*['"](\d+)\.(\d+)""", re.M)


def torch_names_workers(pid: int) -> Optional[bool]:
    """Whether the torch that ``pid`` has loaded names its worker processes (torch >= 2.5):
    read from ``torch/version.py`` beside the ``libtorch`` library in ``/proc/PID/maps``, seen
    through ``/proc/PID/root``. ``None`` when no torch is loaded or the file is unreadable."""
    lib = None
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split(None, 5)  # address perms offset dev inode path
                at = fields[5].find("/torch/lib/libtorch") if len(fields) == 6 else -1
                if at >= 0:
                    lib = fields[5][:at]
                    break
    except OSError:
        return None
    if lib is None:
        return None
    for path in (f"/proc/{pid}/root{lib}/torch/version.py", f"{lib}/torch/version.py"):
        # the job chose what it maps, so this path too: read only as its user could, never a FIFO
        text = procfs.read_as_job(pid, path)
        m = _TORCH_VERSION.search(text) if text is not None else None
        if m:
            return (int(m.group(1)), int(m.group(2))) >= (2, 5)
    return None


@dataclass(frozen=True)
class Classified:
    """One process of the job with its role (see the module docstring). ``start_method`` is
    ``fork``/``spawn``/``forkserver`` for workers (and starting ones); ``owner_pid`` is the
    worker a ``worker_child`` descends from."""

    proc: psutil.Process
    role: str
    start_method: Optional[str] = None
    owner_pid: Optional[int] = None


class Role(NamedTuple):
    """A role as :func:`decide_role` gives it, for a process ``pid``."""

    pid: int
    role: str
    start_method: Optional[str] = None
    owner_pid: Optional[int] = None


def decide_role(
    pid: int,
    name: str,
    ppid: int,
    cmd: Tuple[str, ...],
    age_s: float,
    parent: Optional[Role],
    main_pid: int,
    main_cmd: Tuple[str, ...],
    modern: Callable[[], bool],
) -> Role:
    """The role of a descendant of main (see the module docstring), from its name (psutil's:
    the comm, or the command's base name when the comm is cut at 15 bytes), parent pid, command
    line and age in seconds, and its parent's role (``None`` when the parent is not a process of
    the job). ``modern`` says whether main's torch names its workers (:func:`torch_names_workers`);
    it is called only for a fork child with main's command line. Pure: no ``/proc`` reads."""
    joined = " ".join(cmd)
    if "multiprocessing.resource_tracker" in joined or "torch_shm_manager" in joined:
        return Role(pid, ROLE_OTHER)  # daemons of their own, not the loader's work
    if parent is not None and parent.role in (ROLE_WORKER, ROLE_WORKER_CHILD):
        return Role(pid, ROLE_WORKER_CHILD, owner_pid=parent.pid if parent.role == ROLE_WORKER else parent.owner_pid)
    if name in frames.WORKER_COMMS:
        if parent is not None and parent.role == ROLE_FORKSERVER:
            method = "forkserver"
        elif "multiprocessing.spawn" in joined or "spawn_main" in joined:
            method = "spawn"
        else:
            method = "fork"
        return Role(pid, ROLE_WORKER, method)
    if parent is not None and parent.role == ROLE_FORKSERVER:
        return Role(pid, ROLE_STARTING if age_s < WORKER_START_WINDOW_S else ROLE_OTHER, "forkserver")
    if "multiprocessing.forkserver" in joined:
        return Role(pid, ROLE_FORKSERVER)
    if ppid == main_pid and ("multiprocessing.spawn" in joined or "spawn_main" in joined):
        return Role(pid, ROLE_STARTING if age_s < WORKER_START_WINDOW_S else ROLE_OTHER, "spawn")
    if ppid == main_pid and cmd == main_cmd:
        if not modern():
            return Role(pid, ROLE_WORKER, "fork")  # torch < 2.5 names nothing
        if age_s < FORK_RENAME_WINDOW_S:
            return Role(pid, ROLE_STARTING, "fork")
        return Role(pid, ROLE_OTHER)  # a plain multiprocessing.Process: its wake-ups are not the loader's
    return Role(pid, ROLE_OTHER)


def settled(role: str, age_s: float) -> bool:
    """Whether a process's role can no longer change while its name stays the same: every role
    but a starting worker, once older than the windows in which a fork child renames itself and
    a forked child may still ``exec`` (its command line is then read again only if its name
    changes)."""
    return role != ROLE_STARTING and age_s >= FORK_RENAME_WINDOW_S + 2.0


class Classifier:
    """Classifies main's descendants; remembers per main whether its torch names workers.

    Args:
        clock: ``time.time`` (seconds since the epoch, as psutil's ``create_time``).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._names_workers: Dict[ProcId, Optional[bool]] = {}

    def modern(self, main: ProcId) -> bool:
        """Whether main's torch names its workers (:func:`torch_names_workers`), read once per
        main while known; ``True`` (a current torch) while it cannot be told."""
        if self._names_workers.get(main) is None:
            self._names_workers[main] = torch_names_workers(main.pid)
        return self._names_workers[main] is not False

    def _modern(self, main: psutil.Process) -> bool:
        start = procfs.start_ticks(main.pid)
        return True if start is None else self.modern(ProcId(main.pid, start))

    def classify(self, main: psutil.Process) -> List[Classified]:
        """Main first, then every descendant, parents before children (psutil's walk of the
        tree; the sampler does the same from its own reads). Processes that vanish during the
        walk are left out."""
        out = [Classified(main, ROLE_MAIN)]
        try:
            descendants = main.children(recursive=True)
        except psutil.Error:
            return out
        info = {}
        for proc in descendants:
            try:
                info[proc.pid] = (proc, proc.name(), proc.ppid(), _cmdline(proc), proc.create_time())
            except psutil.Error:
                continue
        main_cmd = _cmdline(main)
        now = self.clock()
        role_of: Dict[int, Role] = {main.pid: Role(main.pid, ROLE_MAIN)}
        modern: List[bool] = []

        def is_modern() -> bool:
            if not modern:
                modern.append(self._modern(main))
            return modern[0]

        for proc, name, ppid, cmd, created in sorted(
            info.values(), key=lambda x: x[4]
        ):  # parents are older than their children
            found = decide_role(
                proc.pid, name, ppid, cmd, now - created, role_of.get(ppid), main.pid, main_cmd, is_modern
            )
            role_of[proc.pid] = found
            out.append(Classified(proc, found.role, found.start_method, found.owner_pid))
        return out
