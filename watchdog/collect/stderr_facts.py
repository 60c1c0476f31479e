"""The job's stderr tail, parsed once into a record (:class:`StderrFacts`) that the diagnosis
rules read: the Python tracebacks in it with their frames and exception lines, PyTorch's
"Original Traceback" of a worker's exception, a faulthandler dump, the lines that say a
DataLoader worker was killed or exited, errno lines with the file they name, ``/dev/shm``
and bus-error lines, a ``DataLoader(timeout=…)`` that fired, and the failures of a queue
feeder thread. Text the job wrote is parsed here, in the collect stage, and nowhere after
it (:func:`stderr_facts` keeps the record with the :class:`~watchdog.types.Facts` it came
from).

The lines matched are the ones these write (their wording is the public source relied on):
CPython's traceback module ("Traceback (most recent call last):", ``  File "…", line N, in
f``, the chaining lines), faulthandler ("Fatal Python error: …", "Current thread 0x… (most
recent call first):"), multiprocessing (queues.py ``_feed``, popen_spawn_posix.py,
popen_forkserver.py, spawn.py ``_main``), torch/utils/data/dataloader.py (``_try_get_data``:
"DataLoader worker (pid(s) N) exited unexpectedly", "DataLoader timed out after N seconds"),
torch/csrc/DataLoader.cpp (the SIGCHLD handler's "is killed by signal: X." and "exited
unexpectedly with exit code N", the worker's own "ERROR: Unexpected segmentation fault
encountered in worker"), torch/_utils.py ``ExceptionWrapper`` ("Caught X in DataLoader worker
process N", "Original Traceback"), aten/src/ATen/MapAllocator.cpp ("unable to open shared
memory object </torch_…>", "unable to mmap", "… (24)"), Python's ``OSError`` ("[Errno 28] No
space left on device: '/path'"), glibc's ``assert`` and libstdc++'s terminate handler, and
torch.cuda's lazy init ("Cannot re-initialize CUDA in forked subprocess").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .. import frames
from ..types import Facts, Frame

TB_FILE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Iteration)\b.*")


def tb_frame(line: str) -> Optional[Frame]:
    """The frame of one ``  File "…", line N, in F`` line of a Python traceback, or ``None``."""
    m = TB_FILE.match(line)
    return Frame(m.group("func"), m.group("file"), int(m.group("line")), False) if m else None


# Where in a worker a stage of PyTorch's pipeline calls the job's code: the source line of the
# frame in torch/utils/data/_utils/{worker,fetch}.py (``_worker_loop``, ``_MapDatasetFetcher.fetch``,
# ``_IterableDatasetFetcher.fetch``).
STAGE_DATASET = "Dataset"
STAGE_COLLATE = "collate_fn"
STAGE_WORKER_INIT = "worker_init_fn"
_STAGE_CALLS = (("collate_fn(", STAGE_COLLATE), ("init_fn(", STAGE_WORKER_INIT), ("dataset", STAGE_DATASET))


@dataclass(frozen=True)
class OriginalTraceback:
    """The last "Original Traceback" PyTorch printed for a worker's exception
    (``ExceptionWrapper.reraise`` in torch/_utils.py), chained parts included: ``frames`` with
    the source line under each (outermost first), and ``exception``, the line of the exception
    finally raised (``None`` when cut off)."""

    frames: Tuple[Tuple[Frame, str], ...]
    exception: Optional[str]

    def user(self) -> Optional[Tuple[Frame, str]]:
        """The innermost frame of the job's own files and its source line (not the standard
        library, torch or an installed package; else the innermost installed package's frame),
        or ``None``."""
        library = None
        for f, source in reversed(self.frames):
            if frames.is_user(f):
                if not frames.is_third_party(f):
                    return f, source
                library = library or (f, source)
        return library

    def stage(self) -> str:
        """Which stage of the worker raised: ``collate_fn``, ``worker_init_fn`` or ``Dataset``
        (the default), from the innermost call PyTorch's worker code made (the source line of
        its frame in torch/utils/data/_utils/worker.py or fetch.py)."""
        for f, source in reversed(self.frames):
            path = frames.normalise_path(f.file)
            if path.endswith(("torch/utils/data/_utils/fetch.py", "torch/utils/data/_utils/worker.py")):
                for call, stage in _STAGE_CALLS:
                    if call in source:
                        return stage
        return STAGE_DATASET


def original_traceback(stderr: str) -> Optional[OriginalTraceback]:
    """The last "Original Traceback" in ``stderr`` (:class:`OriginalTraceback`), or ``None``."""
    at = stderr.rfind("Original Traceback (most recent call last):")
    if at < 0:
        return None
    lines = stderr[at:].splitlines()[1:]
    found: List[Tuple[Frame, str]] = []
    exception = None
    chained = False  # after an exception line, only a chained traceback continues the block
    for i, line in enumerate(lines):
        if exception is not None and not chained:
            text = line.strip()
            if text.startswith(_CHAIN_HEADS):
                chained = True
            elif text:
                break  # the block ended: what follows is main's or a launcher's own output
            continue
        f = tb_frame(line)
        if f is not None:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            found.append((f, "" if tb_frame(nxt) is not None else nxt.strip()))
        elif line and not line.startswith((" ", "\t")) and _EXCEPTION_LINE.match(line.strip()):
            exception, chained = line.strip(), False
    return OriginalTraceback(tuple(found), exception)


_FATAL = re.compile(r"^Fatal Python error: (?P<what>[^\n]+)$", re.M)
_DUMP_HEAD = re.compile(
    r"^(?:Current thread 0x[0-9a-f]+ \(most recent call first\)|Stack \(most recent call first\)):$"
)
_DUMP_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')


@dataclass(frozen=True)
class FatalErrorDump:
    """The last stack ``faulthandler`` wrote for a fatal signal (CPython's faulthandler
    module: "Fatal Python error: Segmentation fault", then the crashing thread's frames):
    ``what`` it says hit, and ``frames`` of the thread that crashed, innermost first."""

    what: str
    frames: Tuple[Frame, ...]

    def user(self) -> Optional[Frame]:
        """The innermost frame of the job's own files (else of an installed package), or ``None``."""
        library = None
        for f in self.frames:
            if frames.is_user(f):
                if not frames.is_third_party(f):
                    return f
                library = library or f
        return library


def fatal_error_dump(stderr: str) -> Optional[FatalErrorDump]:
    """The last faulthandler dump in ``stderr`` (:class:`FatalErrorDump`), or ``None``."""
    found = list(_FATAL.finditer(stderr or ""))
    if not found:
        return None
    m = found[-1]
    stack: List[Frame] = []
    in_stack = False
    for line in stderr[m.end() :].splitlines()[1:200]:
        line = line.rstrip()
        if _DUMP_HEAD.match(line):
            in_stack, stack = True, []
            continue
        if not in_stack:
            continue
        f = _DUMP_FRAME.match(line)
        if f is None:
            break  # the crashing thread's stack ended
        stack.append(Frame(f.group("func"), f.group("file"), int(f.group("line")), False))
    return FatalErrorDump(m.group("what").strip(), tuple(stack))


# The lines that chain one traceback to the next within one exception's report (CPython's
# traceback module): the block goes on after them.
_CHAIN_HEADS = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)


def traceback_location(stderr: str) -> Optional[str]:
    """``file:line`` of the last frame of the job's own files in ``stderr``'s Python tracebacks
    (PyTorch re-raises a worker's error with its "Original Traceback", whose user frame is the
    most precise); an installed package's frame only when there is none; else ``None``."""
    own = library = None
    for line in stderr.splitlines():
        f = tb_frame(line)
        if f is not None and frames.is_user(f):
            if frames.is_third_party(f):
                library = f"{f.file}:{f.line}"
            else:
                own = f"{f.file}:{f.line}"
    return own or library


@dataclass(frozen=True)
class TracebackBlock:
    """One Python traceback printed on stderr (CPython's traceback module): ``frames`` with
    the source line under each (outermost first), ``exception`` its last line (``None`` when
    cut off), whether it is PyTorch's "Original Traceback" of a worker (``original``), and
    whether it was printed by a process of multiprocessing that ended with it
    (``worker``: a frame of ``multiprocessing/process.py`` ``_bootstrap`` or
    ``multiprocessing/spawn.py``, or PyTorch's ``_worker_loop`` outside an "Original
    Traceback")."""

    frames: Tuple[Tuple[Frame, str], ...]
    exception: Optional[str]
    worker: bool
    original: bool = False  # PyTorch's "Original Traceback" of a worker's exception, re-raised in main

    def user(self) -> Optional[Frame]:
        """The innermost frame of the job's own files (not an installed package's), or ``None``."""
        return next((f for f, _ in reversed(self.frames) if frames.is_user(f) and not frames.is_third_party(f)), None)


_WORKER_FILES = ("multiprocessing/process.py", "multiprocessing/spawn.py", "torch/utils/data/_utils/worker.py")


def stderr_traceback_blocks(stderr: str) -> Tuple[List[TracebackBlock], List[str]]:
    """The tracebacks in ``stderr`` (:class:`TracebackBlock`, in order), and the other lines
    that are not part of any (stripped, in order): what a process printed itself, such as
    ``sys.exit("message")``'s message, which multiprocessing prints for a worker before it
    exits with code 1. A line with no indentation that arrives between a traceback's frames
    (another process wrote it meanwhile: processes share stderr) is counted with the other
    lines, not as the traceback's end."""
    lines = (stderr or "").splitlines()
    blocks: List[TracebackBlock] = []
    loose: List[str] = []
    i = 0
    original = False
    while i < len(lines):
        line = lines[i]
        text = line.strip()
        if text.endswith("Traceback (most recent call last):"):
            original = text.startswith("Original Traceback")
            found: List[Tuple[Frame, str]] = []
            exception = None
            i += 1
            while i < len(lines):
                cur = lines[i]
                if not cur.strip():
                    i += 1
                    break
                if cur.startswith((" ", "\t")):
                    f = tb_frame(cur)
                    if f is not None:
                        nxt = lines[i + 1] if i + 1 < len(lines) else ""
                        found.append((f, "" if tb_frame(nxt) is not None else nxt.strip()))
                    i += 1
                    continue
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if nxt.startswith("  File ") or nxt.startswith("    "):
                    loose.append(cur.strip())  # written by another process between frames
                    i += 1
                    continue
                exception = cur.strip()
                i += 1
                break
            worker = not original and any(frames.normalise_path(f.file).endswith(_WORKER_FILES) for f, _ in found)
            blocks.append(TracebackBlock(tuple(found), exception, worker, original))
            continue
        if text and not text.startswith(_CHAIN_HEADS) and not line.startswith((" ", "\t")):
            if not (blocks and blocks[-1].exception == text):
                loose.append(text)
        i += 1
    return blocks, loose


# --- lines of PyTorch's and Python's error messages -------------------------------------------

_ERRNO = re.compile(r"\((\d+)\)\s*$|\[Errno (\d+)\]")
# Lines where PyTorch or Python report a failed shared-memory or descriptor operation.
_RESOURCE_LINE = re.compile(
    r"shared memory|/torch_|unable to mmap|unable to write to file|unable to resize file|Too many open files|"
    r"received 0 items of ancdata|No space left on device|Unexpected bus error|killed by signal: Bus error|"
    r"\[Errno \d+\]"
)
_SIGBUS = re.compile(r"Unexpected bus error|killed by signal: Bus error|insufficient shared memory", re.I)
_KILLED = re.compile(
    r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (?:is killed by signal: ([^.]+)\.|exited unexpectedly)"
)
# A native abort's own words on stderr: glibc's assert(), libstdc++'s terminate handler, CPython.
_ASSERTION = re.compile(r"Assertion [`'].*failed|terminate called after throwing.*|what\(\): .*|Fatal Python error: .*")
_NATIVE_SIGNAL = re.compile(
    r"ERROR: Unexpected (segmentation fault|floating-point exception|bus error) encountered in worker"
)
_START = re.compile(
    r"Can't pickle local object|Can't pickle <|cannot pickle '[^']+' object"
    r"|Can't get attribute '[^']+' on <module '(?:__main__|__mp_main__)'"
    r"|An attempt has been made to start a new process before|daemonic processes are not allowed to have children"
)
_PICKLE = re.compile(r"[Cc]an't pickle|cannot pickle")
# A pickling error counts as a start failure only on the process-start path (Process.start ->
# Popen._launch -> reduction.dump in popen_spawn_posix.py / popen_forkserver.py).
_START_PATH = re.compile(r"popen_(?:spawn|forkserver)_posix\.py|popen_forkserver\.py|in _launch\b")
# A spawned (or forkserver) worker that could not unpickle what main sent it: the class is not
# an attribute of the module the worker imported (multiprocessing/spawn.py ``_main`` runs
# ``pickle.load``; spawn re-imports the main script as ``__mp_main__``, or by its module name
# under ``python -m``).
_UNPICKLE = re.compile(r"Can't get attribute '(?P<attr>[^']+)' on <module '(?P<module>[^']+)'")
# PyTorch's SIGCHLD handler (torch/csrc/DataLoader.cpp) on a worker that exited with a code.
_EXIT_CODE = re.compile(r"DataLoader worker \(pid (\d+)\) exited unexpectedly with exit code (\d+)")
# Main failed to take a batch's shared tensor from the worker that sent it: with the
# file_descriptor sharing strategy the fd is passed through that worker's resource sharer
# (torch/multiprocessing/reductions.py rebuild_storage_fd, Lib/multiprocessing/resource_sharer.py),
# so a worker that ended right after sending leaves main a refused or reset connection instead of
# PyTorch's "exited unexpectedly".
_LOST_RECEIVE = re.compile(
    r"in rebuild_storage_fd\b[\s\S]*?^(?:ConnectionResetError|ConnectionRefusedError|FileNotFoundError|EOFError)\b",
    re.M,
)
# A thread or process could not be created: pthread_create or fork failed with EAGAIN (CPython:
# "can't start new thread"; os.fork / subprocess: "[Errno 11] Resource temporarily unavailable").
_EAGAIN = re.compile(
    r"can't start new thread|\[Errno 11\] Resource temporarily unavailable|Resource temporarily unavailable"
)
_CUDA_FORK = re.compile(r"Cannot re-initialize CUDA in forked subprocess")
_TIMED_OUT = re.compile(r"DataLoader timed out after (\d+(?:\.\d+)?) seconds")
_CAUGHT = re.compile(r"Caught (\w+(?:\.\w+)*) in DataLoader worker process (\d+)")
_SHM_OBJECT = re.compile(r"/torch_|shared memory|\(shm\)|/dev/shm")
_SHM_CREATOR = re.compile(r"torch_(\d+)_")
_QUOTED_PATH = re.compile(r"['\"<](/[^'\">]*)['\">]")
_LITERAL_PATH = re.compile(r"""(?<![\w.])[rbf]{0,2}['"](/[^'"\s]{1,4095})['"]""")
_FEEDER_FRAME = re.compile(r'multiprocessing[/\\]queues\.py", line \d+, in _feed')

# Frames of PyTorch's shared-memory path: a storage moved to or created in shared memory
# (torch/storage.py ``_new_shared``, ``_share_fd_cpu_``, ``share_memory_``) for a queue
# (torch/multiprocessing/reductions.py).
_SHM_FRAMES = ("torch/storage.py", "torch/multiprocessing/reductions.py", "torch/_tensor.py")


def errno_of(line: str) -> Optional[int]:
    """The errno a PyTorch or Python error line ends with (``… (24)``, ``[Errno 24]``), or ``None``."""
    m = _ERRNO.search(line)
    return int(m.group(1) or m.group(2)) if m else None


def names_shared_memory(line: str) -> bool:
    """Whether an error line is about a shared-memory object: a ``/torch_…`` segment
    (aten/src/ATen/MapAllocator.cpp), "shared memory", or a path under ``/dev/shm``."""
    return bool(_SHM_OBJECT.search(line))


def says_bus_error(line: str) -> bool:
    """Whether a line reports a bus error (PyTorch's "Unexpected bus error", "killed by signal:
    Bus error") or its cause, "insufficient shared memory"."""
    return bool(_SIGBUS.search(line))


def says_eagain(line: str) -> bool:
    """Whether a line says a thread or process could not be created (EAGAIN: "can't start new
    thread", "[Errno 11] Resource temporarily unavailable")."""
    return bool(_EAGAIN.search(line))


def unpickle_error(line: str) -> Optional[Tuple[str, str]]:
    """``(attribute, module)`` when a line says a spawned worker could not unpickle an object
    ("Can't get attribute 'X' on <module 'M'"), else ``None``."""
    m = _UNPICKLE.search(line)
    return (m.group("attr"), m.group("module")) if m else None


@dataclass(frozen=True)
class ErrnoLine:
    """A stderr line that reports a failed shared-memory, mapping or descriptor operation:
    ``line`` (stripped), its ``errno`` (``None`` when it names none: "Too many open files"
    and "received 0 items of ancdata" count as 24, "No space left on device" as 28), the
    absolute ``path`` it quotes (``'…'``, ``"…"`` or ``<…>``), and whether it is about shared
    memory (:func:`names_shared_memory`)."""

    line: str
    errno: Optional[int]
    path: Optional[str]
    shared_memory: bool


def errno_lines(text: str) -> Tuple[ErrnoLine, ...]:
    """The :class:`ErrnoLine` of each line of ``text`` that reports a failed shared-memory,
    mapping or descriptor operation, in order."""
    out = []
    for line in text.splitlines():
        if _RESOURCE_LINE.search(line):
            code = errno_of(line)
            if code is None and ("Too many open files" in line or "ancdata" in line):
                code = 24
            elif code is None and "No space left on device" in line:
                code = 28
            path = _QUOTED_PATH.search(line)
            out.append(ErrnoLine(line.strip(), code, path.group(1) if path else None, names_shared_memory(line)))
    return tuple(out)


def is_loader_resource_error(line: str) -> bool:
    """Whether an exception line is one of the loader's resource errors that a rule of its own
    explains (NOTE [ Errno classes ] in watchdog.diagnose.crashes.resources): any EMFILE or
    ENOSPC, a bus error, or ENOENT / ENOMEM on shared memory."""
    if _SIGBUS.search(line):
        return True
    for e in errno_lines(line):
        if e.errno in (24, 28) or (e.errno in (2, 12) and names_shared_memory(line)):
            return True
    return False


@dataclass(frozen=True)
class NoSpace:
    """An ENOSPC (28) error line (:func:`enospc_errors`): ``line``; whether it is about shared
    memory (``shared_memory``); the traceback that ended with it (``block``, ``None`` when
    none did); and the absolute ``path`` the line quotes (``None``: it names none)."""

    line: str
    shared_memory: bool
    block: Optional["TracebackBlock"]
    path: Optional[str]


def _enospc(errors: Tuple[ErrnoLine, ...], blocks: List["TracebackBlock"]) -> Tuple[NoSpace, ...]:
    """:func:`enospc_errors` of the parsed ``errors`` and traceback ``blocks``."""
    by_line: Dict[str, TracebackBlock] = {}
    for b in blocks:
        if b.exception:
            by_line.setdefault(b.exception, b)  # the first: a chained traceback's cause comes first
    out: List[NoSpace] = []
    for e in errors:
        if e.errno != 28:
            continue
        block = by_line.get(e.line)
        if e.shared_memory:
            out.append(NoSpace(e.line, True, block, e.path))
        elif e.path is not None:
            out.append(NoSpace(e.line, False, block, e.path))
        elif block is not None and block.frames:
            shm = any(frames.normalise_path(f.file).endswith(_SHM_FRAMES) for f, _ in block.frames)
            out.append(NoSpace(e.line, shm, block, None))
        else:
            out.append(NoSpace(e.line, True, None, None))
    return tuple(out)


def enospc_errors(stderr: str) -> List[Tuple[str, bool, Optional["TracebackBlock"]]]:
    """``(line, on_shared_memory, traceback block or None)`` for each ENOSPC (28) error line
    of ``stderr``, in order (NOTE [ Errno classes ] in watchdog.diagnose.crashes.resources). A
    line names its file or not: a ``/torch_…`` segment or a path under ``/dev/shm`` is shared
    memory, another path a file system of its own. A line with no path (a plain ``file.write()``:
    ``OSError: [Errno 28] No space left on device``) is shared memory only when its traceback
    runs through PyTorch's shared-memory code (``_SHM_FRAMES``); with a traceback that does
    not, it is the file the frame writes, on another file system; with no traceback at all it
    stays undecided (``None`` in place of the block, and shared memory is assumed, for the
    figures to judge)."""
    return [(n.line, n.shared_memory, n.block) for n in parse_stderr(stderr).enospc]


def _enospc_paths(found: Tuple[NoSpace, ...]) -> Tuple[str, ...]:
    """:func:`enospc_paths` of the parsed ENOSPC lines."""
    out: List[str] = []
    for n in found:
        if n.shared_memory:
            continue
        paths = [n.path] if n.path is not None else []
        if not paths and n.block is not None:
            user = n.block.user()
            src = next((text for f, text in n.block.frames if f == user), "") if user is not None else ""
            paths = [m.group(1) for m in _LITERAL_PATH.finditer(src or "")]
        out += [p for p in paths if "\0" not in p and p not in out]
    return tuple(out)


def enospc_paths(stderr: str) -> List[str]:
    """Absolute paths of the files the ENOSPC errors of ``stderr`` that are not shared memory
    (:func:`enospc_errors`) failed to write, in order, each once: the path the error names
    (``[Errno 28] No space left on device: '/data/x'``), else a string literal that is an
    absolute path in the source line of the traceback's own frame (``open("/scratch/c.bin",
    "wb")``). A path built at run time (``os.path.join(folder, …)``) is not known."""
    return list(parse_stderr(stderr).enospc_paths)


@dataclass(frozen=True)
class KilledWorker:
    """PyTorch's "DataLoader worker (pid(s) N, M) is killed by signal: X." or "… exited
    unexpectedly": the ``pids`` it names, the ``signal`` words (``None`` for "exited
    unexpectedly") and the matched text (``line``)."""

    pids: Tuple[int, ...]
    signal: Optional[str]
    line: str


@dataclass(frozen=True)
class WorkerExitCode:
    """PyTorch's "DataLoader worker (pid N) exited unexpectedly with exit code C": ``pid``,
    ``code`` and the matched text (``line``)."""

    pid: int
    code: int
    line: str


@dataclass(frozen=True)
class NativeSignal:
    """A worker's own C signal handler's "ERROR: Unexpected segmentation fault encountered in
    worker" (also floating-point exception, bus error): ``what`` hit it and the matched
    text (``line``)."""

    what: str
    line: str


@dataclass(frozen=True)
class CaughtInWorker:
    """PyTorch's "Caught X in DataLoader worker process N" (``ExceptionWrapper``): the
    exception class ``exception``, the ``worker_id`` and the matched text (``line``)."""

    exception: str
    worker_id: int
    line: str


@dataclass(frozen=True)
class LoaderTimeout:
    """Main's "DataLoader timed out after N seconds": ``seconds`` and the matched text."""

    seconds: float
    line: str


def _feeder_failures(text: str) -> Tuple[Tuple[str, Optional[str]], ...]:
    """``(exception line, user file:line)`` for each traceback in ``text`` printed by a
    multiprocessing queue feeder thread (``Queue._feed`` in multiprocessing/queues.py, which
    prints the error of a failed pickle and drops the item: ``_on_queue_feeder_error``)."""
    out = []
    blocks = text.split("Traceback (most recent call last):")
    for block in blocks[1:]:
        lines = block.strip("\n").splitlines()
        if not any(_FEEDER_FRAME.search(line) for line in lines):
            continue
        exc = next((line.strip() for line in lines if line and not line.startswith((" ", "\t"))), None)
        user = None
        for line in lines:
            f = tb_frame(line)
            if f is not None and frames.is_user(f):
                user = f"{f.file}:{f.line}"
        if exc:
            out.append((exc, user))
    return tuple(out)


def _start_failures(text: str, blocks: List[TracebackBlock]) -> Tuple[str, ...]:
    """Lines that say DataLoader workers could not start, in order: a pickling error on the
    process-start path, ``__main__`` re-imported without a main guard, a daemonic process
    starting children, and a spawned worker's own traceback from ``pickle.load`` in
    multiprocessing/spawn.py that could not find a class."""
    on_start_path = _START_PATH.search(text) is not None
    lines = [
        line.strip()
        for line in text.splitlines()
        if _START.search(line) and (not _PICKLE.search(line.strip()) or on_start_path)
    ]
    lines += [
        b.exception
        for b in blocks
        if b.worker
        and b.exception
        and _UNPICKLE.search(b.exception)
        and b.exception not in lines
        and any(frames.normalise_path(f.file).endswith("multiprocessing/spawn.py") for f, _ in b.frames)
    ]
    return tuple(lines)


# PyTorch's shm_unlink of one of its /torch_* segments failed (c10::Error "could not unlink the
# shared memory file /torch_…", aten/src/ATen/MapAllocator.cpp): the file was already gone,
# removed underneath the job (the main process then aborts: terminate called after throwing).
_SHM_UNLINK_FAILED = re.compile(r"could not unlink the shared memory file /torch_")


@dataclass(frozen=True)
class StderrFacts:
    """The job's stderr tail, parsed once (:func:`parse_stderr`). ``text`` is the tail itself;
    ``tracebacks`` its Python tracebacks and ``loose`` the lines outside them
    (:func:`stderr_traceback_blocks`); ``original`` the last "Original Traceback" of a
    worker's exception; ``fault`` the last faulthandler dump; ``location`` the ``file:line``
    of the job's own code its tracebacks end in (:func:`traceback_location`); ``errors`` the
    errno lines (:class:`ErrnoLine`) and ``enospc`` the ENOSPC ones judged shared memory or
    not (:class:`NoSpace`), with ``enospc_paths`` the files those on another file system
    failed to write; ``bus_errors`` the bus-error lines; ``shm_creators`` the pids in the
    names of ``torch_<pid>_…`` segments, sorted; ``killed`` and ``exit_codes`` PyTorch's lines
    on workers that ended; ``native_signal`` a worker's own signal handler's first line;
    ``lost_receive`` the error line when main failed to take a shared tensor from a worker
    that had ended (``rebuild_storage_fd``); ``assertions`` a native abort's words;
    ``start_failures`` why workers could not start; ``cuda_fork`` CUDA touched in a forked
    worker; ``timeout`` the first ``DataLoader(timeout=…)`` that fired; ``caught`` the
    worker exceptions main re-raised; ``feeder_failures`` ``(exception line, user
    file:line)`` of each failed queue feeder thread. Lines are stripped, in stderr's order."""

    text: str = ""
    tracebacks: Tuple[TracebackBlock, ...] = ()
    loose: Tuple[str, ...] = ()
    original: Optional[OriginalTraceback] = None
    fault: Optional[FatalErrorDump] = None
    location: Optional[str] = None
    errors: Tuple[ErrnoLine, ...] = ()
    enospc: Tuple[NoSpace, ...] = ()
    enospc_paths: Tuple[str, ...] = ()
    bus_errors: Tuple[str, ...] = ()
    shm_creators: Tuple[int, ...] = ()
    killed: Tuple[KilledWorker, ...] = ()
    exit_codes: Tuple[WorkerExitCode, ...] = ()
    native_signal: Optional[NativeSignal] = None
    lost_receive: Optional[str] = None
    assertions: Tuple[str, ...] = ()
    unlink_failures: Tuple[str, ...] = ()
    start_failures: Tuple[str, ...] = ()
    cuda_fork: Tuple[str, ...] = ()
    timeout: Optional[LoaderTimeout] = None
    caught: Tuple[CaughtInWorker, ...] = ()
    feeder_failures: Tuple[Tuple[str, Optional[str]], ...] = ()

    def errno_lines(self, codes) -> List[str]:
        """The errno lines whose errno is one of ``codes``, in order."""
        return [e.line for e in self.errors if e.errno in codes]

    def last_killed(self) -> Optional[KilledWorker]:
        """PyTorch's last "DataLoader worker (pid N) …" line (the last "killed by signal" one
        when there is one, since it says more), or ``None``."""
        return next((k for k in reversed(self.killed) if k.signal), self.killed[-1] if self.killed else None)

    def worker_traceback(self) -> Optional[TracebackBlock]:
        """The last traceback a worker process printed as it ended, or ``None``."""
        return next((b for b in reversed(self.tracebacks) if b.worker and b.exception), None)

    def worker_last_words(self, count: int = 3) -> List[str]:
        """The last ``count`` lines that are a worker's own (the exception line of a traceback
        a worker process printed as it ended, and lines no traceback holds, such as
        ``sys.exit("message")``'s message), in order, without main's tracebacks."""
        words = [b.exception for b in self.tracebacks if b.worker and b.exception] + [
            line for line in self.loose if not line.startswith(("Process ", "[W ", "Warning:"))
        ]
        return list(dict.fromkeys(words))[-count:]


def parse_stderr(text: str) -> StderrFacts:
    """Parse the job's stderr tail ``text`` into a :class:`StderrFacts`. Never raises on any
    text: what it does not recognise is left out."""
    text = text or ""
    blocks, loose = stderr_traceback_blocks(text)
    errors = errno_lines(text)
    enospc = _enospc(errors, blocks)
    killed = tuple(
        KilledWorker(tuple(int(p) for p in re.findall(r"\d+", m.group(1))), m.group(2) or None, m.group(0))
        for m in _KILLED.finditer(text)
    )
    native = _NATIVE_SIGNAL.search(text)
    lost = _LOST_RECEIVE.search(text)
    timed_out = _TIMED_OUT.search(text)
    return StderrFacts(
        text=text,
        tracebacks=tuple(blocks),
        loose=tuple(loose),
        original=original_traceback(text),
        fault=fatal_error_dump(text),
        location=traceback_location(text),
        errors=errors,
        enospc=enospc,
        enospc_paths=_enospc_paths(enospc),
        bus_errors=tuple(line.strip() for line in text.splitlines() if _SIGBUS.search(line)),
        shm_creators=tuple(sorted({int(pid) for pid in _SHM_CREATOR.findall(text)})),
        killed=killed,
        exit_codes=tuple(
            WorkerExitCode(int(m.group(1)), int(m.group(2)), m.group(0)) for m in _EXIT_CODE.finditer(text)
        ),
        native_signal=NativeSignal(native.group(1), native.group(0)) if native else None,
        lost_receive=lost.group(0).splitlines()[-1] if lost else None,
        assertions=tuple(line.strip() for line in text.splitlines() if _ASSERTION.search(line)),
        unlink_failures=tuple(line.strip() for line in text.splitlines() if _SHM_UNLINK_FAILED.search(line)),
        start_failures=_start_failures(text, blocks),
        cuda_fork=tuple(line.strip() for line in text.splitlines() if _CUDA_FORK.search(line)),
        timeout=LoaderTimeout(float(timed_out.group(1)), timed_out.group(0)) if timed_out else None,
        caught=tuple(CaughtInWorker(m.group(1), int(m.group(2)), m.group(0)) for m in _CAUGHT.finditer(text)),
        feeder_failures=_feeder_failures(text),
    )


def stderr_facts(facts: Facts) -> StderrFacts:
    """The parsed stderr tail of ``facts`` (:func:`parse_stderr` of ``facts.stderr_tail``),
    parsed on the first call and kept with these facts (:meth:`~watchdog.types.Facts.derived`)."""
    return facts.derived(_parse_facts)


def _parse_facts(facts: Facts) -> StderrFacts:
    return parse_stderr(facts.stderr_tail)
