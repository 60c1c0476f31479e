"""The inside view: what the job's own Python processes record about their DataLoaders.

``dlwatch run`` creates a private folder (mode 0700), puts ``watchdog/bootstrap`` first on the
job's ``PYTHONPATH`` and names the folder in ``DLWATCH_HOOK_DIR``; the recorder
(``watchdog/bootstrap/_dlwatch_inside.py``, which also defines the file format) writes
``<pid>.bin`` (counters in a shared ``mmap``, updated per batch), ``<pid>.fetch`` (a worker's
count of samples, updated per sample) and ``<pid>.json`` (settings, workers, threads at fork;
rewritten on rare events). This module reads them at each tick: one
``scandir``, and per file one ``read`` of 5 KiB (``.bin``) or a ``stat`` (``.json``, parsed
again only when it changed). For ``dlwatch attach`` the job opts in when it starts:
``PYTHONPATH=$(dlwatch hook-path) DLWATCH_HOOK_DIR=DIR``, and ``attach --hook-dir DIR`` reads it.
"""

from __future__ import annotations

import collections
import errno
import hmac
import importlib.util
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Annotated, Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Set, Tuple, TypedDict, Union

import msgspec

from ..safefiles import private_dir, safe_parent
from ..types import (
    ForkRecord,
    Frame,
    InsideView,
    LoaderView,
    ProcessEnd,
    RngCheck,
    ThreadAtFork,
    WorkerExec,
    WorkerFailure,
    WorkerFetch,
)

BOOT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bootstrap")


def read_regular(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file at ``path``, opened without following a
    symbolic link and without blocking (the job writes this folder: a FIFO or a link to a device
    there must not hang or steer the sidecar, which may run as root).

    Raises:
        OSError: it cannot be opened, or is not a regular file (``EINVAL``).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _load_format():
    """The recorder module itself, loaded by path under a private name: one definition of the
    file format for writer and reader. It is standard-library only and does nothing on import."""
    spec = importlib.util.spec_from_file_location(
        "_dlwatch_inside_format", os.path.join(BOOT_DIR, "_dlwatch_inside.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {BOOT_DIR}/_dlwatch_inside.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FORMAT = _load_format()


# NOTE [ What the job writes ]: the recorder's files are written by the job, which a root
# dlwatch does not trust. A record (``<pid>.json``) is read only for the job's own processes
# (the pids the sampler saw in the job's tree, :meth:`InsideReader.read`) and for processes
# that ended (folded into a bounded memory, :meth:`InsideReader._retire`), at most
# ``RECORD_MAX_BYTES`` of it, and it is decoded against ``_Record``: every field the view uses
# has its type checked, each list the recorder bounds has that bound, and a value of another
# shape (``[]``, a string for an int, arrays nested a million deep) makes msgspec stop at once
# (its typed decoder never builds what it rejects). Such a record is skipped and named in the
# view's note; the others are kept. The records kept weigh ``RECORDS_MAX_WEIGHT`` in all (an
# estimate of their Python objects, :func:`_weight`): past it, a new one is skipped and named.
# Counter files (``.bin``, ``.fetch``) are opened only for the job's pids, under their one
# canonical name (``123.bin``, never ``0123.bin``), and at most ``HELD_MAX`` stay open.

# Bytes of one record read at most: a record of a busy job (16 iterators that each forked
# workers while 21 threads ran 40 frames deep, dlwatch run of 2026-12-05) weighed 0.8 MiB; the
# recorder's own bounds (MAX_ITERATORS, MAX_THREADS, MAX_FRAMES) allow about 3 MiB, which no
# job near them was seen to reach.
RECORD_MAX_BYTES = 2 << 20
# Estimated bytes of Python objects (:func:`_weight`) of the records of live processes kept in
# all, and of those of processes that ended (``_retired``): that busy job's record took 4.5 MiB
# once parsed (tracemalloc; 7.4 MiB estimated), a usual one (2 iterators, 2 threads) some 30 KiB.
RECORDS_MAX_WEIGHT = 64 << 20
RETIRED_MAX_WEIGHT = 16 << 20
# Counter files held open at most (the least recently read is closed; it is opened again when
# read): a node of 8 ranks of 16 workers holds 136.
HELD_MAX = 256
# Problems named in a view's note at most (then how many more).
NOTE_PROBLEMS = 8

_Scalar = Union[None, bool, int, float, str]
_MAX_WORKERS = 4096  # workers listed of one iterator


class _FrameDoc(TypedDict, total=False):
    file: Optional[str]
    line: Optional[int]
    function: Optional[str]


class _ThreadDoc(TypedDict, total=False):
    name: Optional[str]
    ident: Optional[int]
    native_id: Optional[int]
    daemon: Optional[bool]
    forking: Optional[bool]
    stack: Optional[Annotated[List[_FrameDoc], msgspec.Meta(max_length=FORMAT.MAX_FRAMES)]]


class _DatasetDoc(TypedDict, total=False):
    type: Optional[str]
    module: Optional[str]
    code: Optional[_FrameDoc]


class _CudaDoc(TypedDict, total=False):
    host_memory_stats: Optional[Annotated[Dict[str, Union[int, float]], msgspec.Meta(max_length=256)]]
    pin_thread_alive: Optional[bool]


class _IteratorDoc(TypedDict, total=False):
    id: int
    slot: Optional[int]
    kind: Optional[str]
    created_ns: Optional[int]
    created_wall: Optional[float]
    forked_ns: Optional[int]
    site: Optional[_FrameDoc]
    settings: Optional[Annotated[Dict[str, _Scalar], msgspec.Meta(max_length=64)]]
    pin_memory_effective: Optional[bool]
    dataset: Optional[_DatasetDoc]
    iterable: Optional[bool]
    workers: Optional[Annotated[List[Optional[int]], msgspec.Meta(max_length=_MAX_WORKERS)]]
    worker_exitcodes: Optional[Annotated[List[Optional[int]], msgspec.Meta(max_length=_MAX_WORKERS)]]
    threads_at_fork: Optional[Annotated[List[_ThreadDoc], msgspec.Meta(max_length=FORMAT.MAX_THREADS)]]
    os_threads_at_fork: Optional[Annotated[List[Tuple[int, str]], msgspec.Meta(max_length=4 * FORMAT.MAX_THREADS)]]
    check_first_batches: Optional[bool]
    check_error: Optional[str]
    first_batches: Optional[Annotated[Dict[str, str], msgspec.Meta(max_length=_MAX_WORKERS)]]
    cuda: Optional[_CudaDoc]


_Digests = Annotated[Dict[str, str], msgspec.Meta(max_length=FORMAT.MAX_RNG_ATTRIBUTES + 2)]


class _WorkerDoc(TypedDict, total=False):
    id: Optional[int]
    num_workers: Optional[int]
    seed: Optional[int]
    rng_start: Optional[_Digests]
    rng_later: Optional[_Digests]
    check_error: Optional[str]


class _ExecDoc(TypedDict, total=False):
    path: Optional[str]
    stack: Optional[Annotated[List[_FrameDoc], msgspec.Meta(max_length=FORMAT.MAX_FRAMES)]]
    ns: Optional[int]


_EndedText = Annotated[str, msgspec.Meta(max_length=FORMAT.MAX_ENDED_TEXT)]


class _EndedDoc(TypedDict, total=False):
    name: Optional[_EndedText]
    code: Optional[int]
    exception: Optional[_EndedText]
    ns: Optional[int]


class _RecordDoc(TypedDict, total=False):
    """A ``<pid>.json`` as the recorder writes it (``_Process.write_json``); unknown keys are
    skipped. ``failed`` entries are checked one by one (:func:`failure_records`)."""

    pid: Optional[int]
    ppid: Optional[int]
    python: Optional[str]
    torch: Optional[str]
    disabled: Optional[str]
    iterators: Optional[Annotated[List[_IteratorDoc], msgspec.Meta(max_length=FORMAT.MAX_ITERATORS)]]
    worker: Optional[_WorkerDoc]
    exec: Optional[_ExecDoc]
    ended: Optional[_EndedDoc]
    failed: Optional[
        Annotated[
            List[
                Dict[str, Union[_Scalar, Annotated[List[_Scalar], msgspec.Meta(max_length=FORMAT.MAX_FAILED_INDICES)]]]
            ],
            msgspec.Meta(max_length=FORMAT.MAX_FAILED),
        ]
    ]


_RECORD = msgspec.json.Decoder(_RecordDoc)


def parse_record(data: bytes) -> Dict[str, Any]:
    """A ``<pid>.json`` record (``data``, at most ``RECORD_MAX_BYTES``) as plain dicts and
    lists, each field the view uses of the type the recorder writes (``_RecordDoc``;
    NOTE [ What the job writes ]). msgspec's typed decoder
    (https://jcristharif.com/msgspec/usage.html#typed-decoding) stops at the first value of
    another type, and its depth guard raises ``RecursionError`` on nesting deeper than the
    interpreter's recursion limit (an unknown key's value is still walked).

    Raises:
        ValueError: not JSON, or not of that shape (the message says where), or too deep.
    """
    if len(data) > RECORD_MAX_BYTES:
        raise ValueError(f"a record of more than {RECORD_MAX_BYTES >> 20} MiB")
    try:
        return _RECORD.decode(data)  # type: ignore[return-value]  # a TypedDict is a dict
    except msgspec.ValidationError as e:
        raise ValueError(f"malformed record ({e})") from None
    except msgspec.DecodeError as e:
        raise ValueError(str(e)) from None
    except RecursionError:
        raise ValueError("malformed record (nested too deep)") from None


def _weight(data: bytes) -> int:
    """An estimate (bytes) of the Python objects a parsed record ``data`` holds, from its
    bytes and the counts of its strings, objects, arrays and items (CPython 3.11's sizes: a
    string object 49 bytes and up, a small dict 184, a list 56 and 8 a slot): a record of short
    strings weighs many times its size."""
    return len(data) + 28 * data.count(b'"') + 184 * data.count(b"{") + 56 * data.count(b"[") + 8 * data.count(b",")


def pid_of(stem: str) -> Optional[int]:
    """The pid a recorder's file name stem (``123`` of ``123.bin``) names, or ``None`` unless it
    is written as the recorder writes it (ASCII digits, no leading zero): every pid has one
    name per kind of file."""
    if stem.isdigit() and stem.isascii() and (stem[0] != "0" or stem == "0"):
        return int(stem)
    return None


def hook_env(
    env: Mapping[str, str], folder: str, ancestor_pid: Optional[int], data_checks: bool = True
) -> Dict[str, str]:
    """``env`` with the bootstrap first on ``PYTHONPATH`` and the recorder's variables set.

    Args:
        env: the environment the job would get.
        folder: the private folder the job's processes write to.
        ancestor_pid: the pid whose descendants record (the watchdog's own); ``None``: every
            process that inherits the variables records (the opt-in for ``attach``).
        data_checks: ``False`` turns the recorder's data-correctness checks off.
    """
    out = dict(env)
    path = out.get("PYTHONPATH")
    out["PYTHONPATH"] = BOOT_DIR + (os.pathsep + path if path else "")
    out[FORMAT.ENV_DIR] = folder
    out.pop(TOKEN_ENV, None)
    token = _token_of(folder)
    if token:
        out[TOKEN_ENV] = token
    out.pop(FORMAT.ENV_ANCESTOR, None)
    out.pop(FORMAT.ENV_CHECKS, None)
    if not data_checks:
        out[FORMAT.ENV_CHECKS] = "0"
    if ancestor_pid is not None:
        out[FORMAT.ENV_ANCESTOR] = str(ancestor_pid)
    return out


# The job's proof that a hook folder is its own: ``make_folder`` writes a random token into the
# folder (TOKEN_FILE, 0600, in a 0700 folder) and ``hook_env`` gives it to the job; ``folder_of``
# takes a folder only from a job whose environment holds the same token. Another user's job can
# name any ``/tmp/dlwatch-hook-*`` it sees, but cannot read that folder's token.
TOKEN_ENV = "DLWATCH_HOOK_TOKEN"
TOKEN_FILE = ".token"


def _token_of(folder: str) -> Optional[str]:
    try:
        return read_regular(os.path.join(folder, TOKEN_FILE), 256).decode("ascii", "replace").strip() or None
    except OSError:
        return None


def _raw_environ(pid: int, names: Iterable[str]) -> Dict[str, str]:
    """The values of ``names`` in ``/proc/PID/environ``, unredacted (a token compared here,
    never written anywhere)."""
    wanted = {n.encode() for n in names}
    out: Dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return out
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in wanted:
            out[key.decode()] = os.fsdecode(value)
    return out


# ``tempfile.mkdtemp(prefix=HOOK_PREFIX)`` names: the prefix and eight of its random characters.
HOOK_PREFIX = "dlwatch-hook-"
_HOOK_NAME = re.compile(re.escape(HOOK_PREFIX) + r"[a-z0-9_]{8}\Z")


@dataclass(frozen=True)
class HookFolder:
    """A recorder folder and its identity when dlwatch made or accepted it: ``dev`` and
    ``ino`` of the directory (``lstat``). Only a folder that still has that identity is ever
    removed (:func:`remove_folder`)."""

    path: str
    dev: int
    ino: int


def is_hook_folder(path: str) -> bool:
    """Whether ``path`` is a folder ``dlwatch hook-env`` or ``dlwatch run`` could have made:
    named ``dlwatch-hook-XXXXXXXX``, a directory (not a link) of this user closed to others, in
    a folder nobody else may rename entries of."""
    return bool(_HOOK_NAME.match(os.path.basename(path))) and private_dir(path) is not None and safe_parent(path)


def folder_of(pid: int) -> Optional[HookFolder]:
    """The recorder folder a job started with ``env $(dlwatch hook-env) …`` names in its
    environment (``DLWATCH_HOOK_DIR`` in ``/proc/PID/environ``), or ``None`` unless it is one
    ``dlwatch hook-env`` made for this job: named ``dlwatch-hook-XXXXXXXX``, a directory (not a
    link) of this user closed to others, in a folder nobody else may rename entries of, whose
    token (``TOKEN_FILE``) the job's environment holds (``DLWATCH_HOOK_TOKEN``). The job
    controls its environment; this is what keeps it from pointing a root dlwatch at ``/root``
    or at another job's hook folder (which :func:`remove_folder` would then delete)."""
    env = _raw_environ(pid, (FORMAT.ENV_DIR, TOKEN_ENV))
    folder = env.get(FORMAT.ENV_DIR)
    if not folder or not os.path.isabs(folder) or not _HOOK_NAME.match(os.path.basename(folder)):
        return None
    for path in (folder, f"/proc/{pid}/root{folder}"):
        st = private_dir(path)
        if st is not None and safe_parent(path):
            token = _token_of(path)
            if token is None or not hmac.compare_digest(token, env.get(TOKEN_ENV, "")):
                return None  # not the folder made for this job
            return HookFolder(path, st.st_dev, st.st_ino)
    return None


def make_folder() -> HookFolder:
    """A new private folder (0700) for the recorder's files, in the temporary directory.

    Raises:
        OSError: the temporary directory cannot be written.
    """
    path = tempfile.mkdtemp(prefix=HOOK_PREFIX)
    fd = os.open(os.path.join(path, TOKEN_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secrets.token_hex(16))
    st = os.lstat(path)
    return HookFolder(path, st.st_dev, st.st_ino)


# How old (seconds since its last change) a hook folder holding nothing but its token must be
# before `dlwatch hook-env` sweeps it: made for a job that never started, or never recorded.
STALE_HOOK_S = 86400.0


def sweep_stale_folders(parent: Optional[str] = None, max_age_s: float = STALE_HOOK_S) -> List[str]:
    """Remove the hook folders ``dlwatch hook-env`` left in ``parent`` (default: the temporary
    directory ``make_folder`` uses) that hold nothing but their token and have not changed for
    ``max_age_s`` seconds; returns their paths. Only a directory named ``dlwatch-hook-XXXXXXXX``
    that is this user's and closed to others is touched (``lstat``, never through a link), in a
    parent nobody else may rename entries of (:func:`safe_parent`); it is opened once
    (``O_DIRECTORY|O_NOFOLLOW``), listed, its token file unlinked through that descriptor and
    then the folder removed with rmdir(2), which removes only an empty folder. A folder a job
    recorded into (files besides the token) is left for ``dlwatch attach`` to remove. Errors
    are ignored: nothing is removed then."""
    parent = parent or tempfile.gettempdir()
    if not safe_parent(os.path.join(parent, HOOK_PREFIX)):
        return []
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    now, removed = time.time(), []
    for name in names:
        path = os.path.join(parent, name)
        if not _HOOK_NAME.match(name):
            continue
        st = private_dir(path)
        if st is None or now - st.st_mtime < max_age_s:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != (st.st_dev, st.st_ino):
                continue
            entries = os.listdir(fd)
            if entries not in ([], [TOKEN_FILE]):
                continue
            if entries and not stat.S_ISREG(os.stat(TOKEN_FILE, dir_fd=fd, follow_symlinks=False).st_mode):
                continue
            if entries:
                os.unlink(TOKEN_FILE, dir_fd=fd)
            os.rmdir(path)
            removed.append(path)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def remove_folder(folder: HookFolder) -> bool:
    """Remove the recorder's folder and its files, only while ``folder.path`` still names the
    directory dlwatch made or accepted (same ``dev`` and ``ino``, not a link, still this
    user's and private); ``shutil.rmtree`` then removes it without following links (it works
    from directory descriptors where the platform allows: ``shutil.rmtree.avoids_symlink_attacks``).
    Returns whether it was removed; errors are ignored (it lives in /tmp)."""
    st = private_dir(folder.path)
    if st is None or (st.st_dev, st.st_ino) != (folder.dev, folder.ino):
        return False
    shutil.rmtree(folder.path, ignore_errors=True)
    return not os.path.lexists(folder.path)


def percentile_s(hist: Tuple[int, ...], q: float) -> Optional[float]:
    """The ``q`` quantile (0..1) of a recorder histogram, as the upper bound of its bucket in
    seconds, or ``None`` for an empty histogram."""
    total = sum(hist)
    if not total:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(hist):
        seen += n
        if n and seen >= rank:
            return FORMAT.bucket_bounds_s(i)[1]
    return FORMAT.bucket_bounds_s(len(hist) - 1)[1]


def _frame(d: Optional[dict]) -> Optional[Frame]:
    if not d:
        return None
    return Frame(str(d.get("function")), str(d.get("file")), int(d.get("line") or 0), False)


def _settings(d: Mapping[str, object]) -> Tuple[Tuple[str, object], ...]:
    return tuple((str(k), v) for k, v in d.items() if isinstance(v, (bool, int, float, str)) or v is None)


# (pid, iterator) -> (its JSON record, LoaderView's fields taken from it; its last histogram,
# that histogram's (p50, p99)): what loader_views makes again only when the record or the
# histogram is another one
LoaderCache = Dict[Tuple[int, int], Tuple[object, Dict[str, Any], Tuple[int, ...], Tuple[Optional[float], ...]]]


_INT = re.compile(r"-?[0-9]{1,19}")


def _static_fields(pid: int, r: Mapping[str, Any]) -> Dict[str, Any]:
    """The fields of a :class:`LoaderView` that its JSON record ``r`` decides."""
    dataset = r.get("dataset") or {}
    cuda = r.get("cuda") or {}
    return dict(
        pid=pid,
        kind=str(r.get("kind") or "?"),
        site=_frame(r.get("site")),
        settings=_settings(r.get("settings") or {}),
        dataset_type=dataset.get("type"),
        iterable=bool(r.get("iterable")),
        workers=tuple(int(p) for p in (r.get("workers") or []) if p),
        dataset_code=_frame(dataset.get("code")),
        worker_exitcodes=tuple(r.get("worker_exitcodes") or ()),
        created=(r.get("created_ns") or 0) / 1e9,
        pin_memory_effective=r.get("pin_memory_effective"),
        host_memory=tuple(
            (str(k), float(v))
            for k, v in sorted((cuda.get("host_memory_stats") or {}).items())
            if isinstance(v, (int, float))
        ),
        pin_thread_alive=cuda.get("pin_thread_alive"),
        first_batches=tuple(
            sorted((int(k), str(v)) for k, v in (r.get("first_batches") or {}).items() if _INT.fullmatch(str(k)))
        ),
    )


def loader_views(
    pid: int, doc: Optional[dict], slots: Iterable[dict], cache: Optional[LoaderCache] = None
) -> Tuple[LoaderView, ...]:
    """Join a process's JSON record and its counters into one :class:`LoaderView` per live
    iterator (its slot's iterator id matches a record).

    Args:
        pid: the process that wrote them.
        doc: the parsed ``<pid>.json`` (``None``: not written yet).
        slots: ``read_slots``'s dicts. The recorder's ``CLOCK_MONOTONIC`` nanoseconds become
            ``time.monotonic()`` seconds (the same clock on Linux).
        cache: kept by the caller between calls (a reader reads every rank's loaders at every
            tick): the fields taken from a record are made again only when it is another
            object (the file changed), the percentiles only when the histogram changed.
    """
    records = {r.get("id"): r for r in (doc or {}).get("iterators") or () if isinstance(r, dict)}
    cache = {} if cache is None else cache
    out = []
    for s in slots:
        iterator = int(s["iterator"])
        r = records.get(s["iterator"], {})
        hist = tuple(s["hist"])
        kept = cache.get((pid, iterator))
        if kept is None or kept[0] is not r or kept[2] != hist:
            static = kept[1] if kept is not None and kept[0] is r else _static_fields(pid, r)
            quantiles = (
                kept[3] if kept is not None and kept[2] == hist else (percentile_s(hist, 0.5), percentile_s(hist, 0.99))
            )
            kept = (r, static, hist, quantiles)
            cache[(pid, iterator)] = kept
        out.append(
            LoaderView(
                iterator=iterator,
                batches=int(s["batches"]),
                wait_s=s["wait_ns"] / 1e9,
                epoch=int(s["epoch"]),
                first_batch_s=s["first_ns"] / 1e9 if s["first_ns"] else None,
                waiting_since=s["since_ns"] / 1e9 if s["since_ns"] else None,
                waiting_idx=int(s["waiting_idx"]),
                waiting_worker=int(s["waiting_worker"]),
                last_batch=s["last_ns"] / 1e9 if s["last_ns"] else None,
                intervals=sum(hist),
                interval_p50_s=kept[3][0],
                interval_p99_s=kept[3][1],
                **kept[1],
            )
        )
    seen = {v.iterator for v in out}
    for key in [k for k in cache if k[0] == pid and k[1] not in seen]:
        del cache[key]  # an iterator that ended (each epoch's, without persistent_workers)
    return tuple(out)


def fork_records(pid: int, doc: Optional[dict]) -> Tuple[ForkRecord, ...]:
    """The threads at fork of each iterator in a process's JSON record that forked workers."""
    out = []
    for r in (doc or {}).get("iterators") or ():
        threads = r.get("threads_at_fork") if isinstance(r, dict) else None
        if not threads:
            continue
        out.append(
            ForkRecord(
                pid=pid,
                iterator=int(r.get("id") or 0),
                site=_frame(r.get("site")),
                workers=tuple(int(p) for p in (r.get("workers") or []) if p),
                threads=tuple(
                    ThreadAtFork(
                        name=t.get("name"),
                        native_id=t.get("native_id"),
                        daemon=t.get("daemon"),
                        forking=bool(t.get("forking")),
                        frames=tuple(
                            fr for fr in (_frame(f) for f in reversed(t.get("stack") or [])) if fr is not None
                        ),
                    )
                    for t in threads
                ),
                os_threads=tuple(
                    (int(x[0]), str(x[1]))
                    for x in (r.get("os_threads_at_fork") or [])
                    if isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], int)
                ),
            )
        )
    return tuple(out)


def rng_check(pid: int, doc: Optional[dict]) -> Optional[RngCheck]:
    """A worker's record of its random generators (``worker`` in its JSON), or ``None``."""
    w = (doc or {}).get("worker")
    if doc is None or not isinstance(w, dict) or not w.get("rng_start"):
        return None
    worker_id = _int(w.get("id"))
    return RngCheck(
        pid=pid,
        ppid=int(doc.get("ppid") or 0),
        worker_id=-1 if worker_id is None else worker_id,
        num_workers=int(w.get("num_workers") or 0),
        start=tuple(sorted((str(k), str(v)) for k, v in w["rng_start"].items())),
        later=tuple(sorted((str(k), str(v)) for k, v in (w.get("rng_later") or {}).items())),
    )


def exec_record(pid: int, doc: Optional[dict]) -> Optional[WorkerExec]:
    """A worker's record of the program it exec'd (``exec`` in its JSON), or ``None``."""
    e = (doc or {}).get("exec")
    if not isinstance(e, dict) or not e.get("path"):
        return None
    frames = tuple(f for f in (_frame(d) for d in (e.get("stack") or [])[:64] if isinstance(d, dict)) if f)
    return WorkerExec(pid, str(e["path"]), frames)


def end_record(pid: int, doc: Optional[dict]) -> Optional[ProcessEnd]:
    """How a multiprocessing process other than a worker said it ended (``ended`` in its JSON,
    the recorder's ``_on_mp_end``), or ``None``."""
    e = (doc or {}).get("ended")
    if not isinstance(e, dict):
        return None
    ns = _int(e.get("ns"))
    name, exception = e.get("name"), e.get("exception")
    return ProcessEnd(
        pid,
        name if isinstance(name, str) else None,
        _int(e.get("code")),
        exception if isinstance(exception, str) else None,
        ns / 1e9 if ns is not None else None,
    )


# The job writes its records: an integer it gives is taken only within 64 bits (JSON has no
# bound, and one past a float's range made a timestamp's ``ns / 1e9`` raise OverflowError).
_INT_LIMIT = 1 << 63


def _int(value) -> Optional[int]:
    """``value`` when it is an integer (not a bool) within 64 bits, else ``None``."""
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and -_INT_LIMIT <= value < _INT_LIMIT else None
    )


def failure_records(pid: int, doc: Optional[dict]) -> Tuple[WorkerFailure, ...]:
    """A worker's records of the batches it failed to fetch (``failed`` in its JSON; malformed
    entries skipped)."""
    out = []
    for d in ((doc or {}).get("failed") or [])[:8]:
        if not isinstance(d, dict) or _int(d.get("batch")) is None:
            continue
        raw = d.get("indices")
        indices = tuple(raw[:64]) if isinstance(raw, list) and all(_int(i) is not None for i in raw) else None
        exc = d.get("exception")
        ns = _int(d.get("ns")) or 0
        out.append(
            WorkerFailure(
                pid,
                _int(d.get("worker")),
                d["batch"],
                indices,
                _int(d.get("sample")),
                str(exc)[:80] if exc else None,
                ns / 1e9,
                str(d["through"])[:120] if isinstance(d.get("through"), str) else None,
            )
        )
    return tuple(out)


# Records of ended processes kept after their files are removed (:meth:`InsideReader._retire`).
RETIRED_KEPT = 256
# Seconds between two looks for processes that ended (InsideReader._retire), for the reader
# the ranks of a job share: each look checks every pid of the folder that its caller did not
# sample (the other ranks' and their workers').
RETIRE_EVERY_S = 5.0


# Nanoseconds by which a listing must follow the folder's mtime to be used again while the mtime
# stays (InsideReader._list): well above a file system's clock tick (a jiffy, up to 10 ms).
_RACY_NS = 100_000_000


def _records_all(doc: dict, slots: Iterable[dict]) -> bool:
    """Whether the record ``doc`` has an entry for the iterator of each of ``slots``."""
    ids = {r.get("id") for r in doc.get("iterators") or () if isinstance(r, dict)}
    return all(s["iterator"] in ids for s in slots)


class _Retired(NamedTuple):
    forks: Tuple[ForkRecord, ...]
    rng: Tuple[RngCheck, ...]
    execs: Tuple[WorkerExec, ...]
    problem: Optional[str] = None
    failures: Tuple[WorkerFailure, ...] = ()
    weight: int = 0  # its record's _weight
    ends: Tuple[ProcessEnd, ...] = ()


def _records(pid: int, doc: Optional[dict]) -> _Retired:
    """What the view takes from the record ``doc`` of ``pid``: its fork records, RNG check,
    exec, failures and how it ended."""
    check, became, end = rng_check(pid, doc), exec_record(pid, doc), end_record(pid, doc)
    return _Retired(
        fork_records(pid, doc),
        (check,) if check else (),
        (became,) if became else (),
        failures=failure_records(pid, doc),
        ends=(end,) if end else (),
    )


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _alive(pid: str) -> bool:
    return os.path.exists(f"/proc/{pid}")


class InsideReader:
    """Reads the recorder's folder at each tick; never raises (a bad file is skipped and named
    in the view's ``note``).

    Args:
        folder: the private folder given to the job, or ``None`` (no inside view).
        why_none: the note when ``folder`` is ``None``.
        retire: fold the records of processes that ended into memory and remove their files
            (:meth:`_retire`): the watch loop's reader of a job's folder; a one-off look
            (``dlwatch status``) leaves the folder as it is.
    """

    def __init__(self, folder: Optional[str], why_none: str = "no inside view", retire: bool = False) -> None:
        self.folder = folder
        self.why_none = why_none
        self.retire = retire
        # pid -> (mtime_ns, parsed JSON, the listing generation at which that mtime was checked)
        self._docs: Dict[int, Tuple[int, Optional[dict], int]] = {}
        self._generation = 0  # listings made so far (_list); a new one after every change of the folder
        self._problems: Dict[str, str] = {}  # file name -> what is wrong with it
        self._saw_any = False
        # pid -> the _weight of its record kept in _docs, and their sum (RECORDS_MAX_WEIGHT)
        self._weights: Dict[int, int] = {}
        self._weight = 0
        self._retired_weight = 0  # the sum of _retired's weights (RETIRED_MAX_WEIGHT)
        # The job's processes: every pid a caller gave (the sampler's, of the job's tree) and
        # that still runs or has files; only their records are read (NOTE [ What the job
        # writes ]). ``_given``: some were given (a reader never given any, a one-off look at a
        # folder, reads every pid's).
        self._job: Set[int] = set()
        self._given = False
        self._lock = threading.Lock()  # the loop and the ranks' examinations read from their threads
        # What the files of processes that ended said, kept after the files are removed: the last
        # RETIRED_KEPT of them, RETIRED_MAX_WEIGHT in all (a week with persistent_workers=False
        # starts a worker a second).
        self._retired: "collections.OrderedDict[int, _Retired]" = collections.OrderedDict()
        # The counters' files (.bin, .fetch) held open: name -> (descriptor, inode), the least
        # recently read first, HELD_MAX at most. A lean tick reads each with one pread() and no
        # listing of the folder (the names of the last full read); a full read lists it again
        # and closes what went or was replaced.
        self._held: "collections.OrderedDict[str, Tuple[int, int]]" = collections.OrderedDict()
        self._names: Optional[List[str]] = None
        self._listed_mtime: Optional[int] = None  # the folder's mtime (ns) at that listing, when trusted
        self._by_pid: Dict[int, List[str]] = {}  # the names of _names by the pid that wrote them
        self._retired_at = float("-inf")
        # caller (its first pid) -> the pids (as named) it did not sample at its last full read
        self._unsampled: Dict[Optional[int], Set[str]] = {}
        # pid -> (its parsed record, what _read takes from it): made again when the record is
        # another object (the file changed), so a record read at every tick is interpreted once
        self._derived: Dict[int, Tuple[Optional[dict], _Retired]] = {}
        self._views: LoaderCache = {}  # loader_views' cache
        self._retired_problems: Set[str] = set()  # the problems of _retired's records
        # caller (its first pid) -> (when, the pids it sampled for its latest full read: alive then)
        self._sampled: Dict[Optional[int], Tuple[float, frozenset]] = {}

    def _counter_bytes(self, name: str, limit: int) -> bytes:
        """At most ``limit`` bytes of the counters' file ``name``, through a descriptor held
        open (opened as :func:`read_regular` opens: no link followed, never blocking, a
        regular file only). ``HELD_MAX`` descriptors are held at most: opening one more closes
        the least recently read, whatever the job wrote into the folder.

        Raises:
            OSError: it cannot be opened or read, or is not a regular file (``EINVAL``).
        """
        held = self._held.get(name)
        if held is None:
            fd = os.open(
                os.path.join(self.folder or "", name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            )
            try:
                st = os.fstat(fd)
            except OSError:
                os.close(fd)
                raise
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise OSError(errno.EINVAL, "not a regular file", name)
            while len(self._held) >= HELD_MAX:
                _close(self._held.popitem(last=False)[1][0])
            self._held[name] = held = (fd, st.st_ino)
        else:
            self._held.move_to_end(name)
        return os.pread(held[0], limit, 0)

    def _release(self, listed: Mapping[str, int]) -> None:
        """Close the held descriptors whose file is no longer listed (``listed``: name ->
        inode), or is another file now."""
        for name, (fd, ino) in list(self._held.items()):
            if listed.get(name) != ino:
                del self._held[name]
                _close(fd)

    def _list(self) -> List[str]:
        """The folder's names (sorted). The recorder writes each ``.json`` whole to a temporary
        file and renames it over the old one (``_write_atomic`` in
        watchdog/bootstrap/_dlwatch_inside.py), so every change of the folder's files (one
        created, removed or replaced) updates the folder's mtime: while the mtime is the
        listing's, the last listing is used again, and a record checked since it (its mtime,
        :meth:`_doc`) is not looked at again. Every new listing is a new generation, after which
        each record is checked once more, by whichever caller reads it first (the ranks of a
        job share this reader). A listing taken within ``_RACY_NS`` of the mtime it saw (2 s
        where the file system keeps whole seconds) is not trusted next time: a file system's
        timestamps come from a coarse clock, and a change made in the same clock tick would
        leave the mtime as it was (git's "racy" index entries have the same cause). Listing
        also closes the held descriptors of files gone or replaced.

        Raises:
            OSError: the folder cannot be read.
        """
        assert self.folder is not None
        t_ns = time.time_ns()
        mtime = os.stat(self.folder).st_mtime_ns
        if self._names is not None and mtime == self._listed_mtime:
            return self._names
        listed = {e.name: e.inode() for e in os.scandir(self.folder)}
        names = sorted(listed)
        self._release(listed)
        self._index(names)
        self._generation += 1
        racy = _RACY_NS if mtime % 10**9 else 2 * 10**9  # whole seconds: a coarser file system
        self._listed_mtime = mtime if t_ns - mtime > racy else None
        return names

    def _index(self, names: List[str]) -> None:
        """Keep ``names`` as the last listing, and by the pid that wrote them."""
        self._names = names
        self._by_pid = collections.defaultdict(list)
        for n in names:
            pid = pid_of(n.partition(".")[0])
            if pid is not None:
                self._by_pid[pid].append(n)

    def _doc(self, pid: int, path: str) -> Optional[dict]:
        """The parsed record of ``pid`` at ``path``: the one read before when it was checked
        since the last listing (:meth:`_list`), or while its mtime is the same; else read
        again (:func:`parse_record`). A record that cannot be parsed, or would take the records
        kept past ``RECORDS_MAX_WEIGHT``, is named in :attr:`_problems` and not read again
        while its mtime stays; the one read before (if any) is kept."""
        cached = self._docs.get(pid)
        if cached is not None and cached[2] == self._generation:
            return cached[1]
        try:
            mtime = os.lstat(path).st_mtime_ns
        except OSError:
            return cached[1] if cached else None
        if cached is not None and cached[0] == mtime:
            self._docs[pid] = (mtime, cached[1], self._generation)
            return cached[1]
        name = os.path.basename(path)
        kept = cached[1] if cached else None
        try:
            data = read_regular(path, RECORD_MAX_BYTES + 1)
        except OSError as e:
            self._problems[name] = f"{name}: {e}"
            return kept
        try:
            weight = _weight(data)
            if self._weight - self._weights.get(pid, 0) + weight > RECORDS_MAX_WEIGHT:
                raise ValueError(f"skipped: the records kept would weigh over {RECORDS_MAX_WEIGHT >> 20} MiB")
            doc = parse_record(data)
        except ValueError as e:
            self._problems[name] = f"{name}: {str(e)[:200]}"
            self._docs[pid] = (mtime, kept, self._generation)  # not read again while it stays
            return kept
        self._weight += weight - self._weights.get(pid, 0)
        self._weights[pid] = weight
        self._docs[pid] = (mtime, doc, self._generation)
        self._problems.pop(name, None)
        if doc.get("disabled"):
            self._problems[name] = f"the recorder in pid {pid} stopped: {str(doc['disabled'])[:200]}"
        return doc

    def _forget(self, pid: int) -> None:
        """Drop what is kept of ``pid``'s record and counters."""
        self._docs.pop(pid, None)
        self._derived.pop(pid, None)
        self._weight -= self._weights.pop(pid, 0)
        for key in [k for k in self._views if k[0] == pid]:
            del self._views[key]

    def read(self, pids: Optional[Iterable[int]] = None, forks: bool = True, counters: bool = False) -> InsideView:
        """The view now: loaders of ``pids`` (the job's processes, when ``None``) and, with
        ``forks``, the records (forks, RNG checks, execs, failures) of every process of the job
        (a worker that exec'd another program may no longer be one of ``pids``); without,
        those of ``pids`` only (a rank's tick: the folder holds every rank's processes) and
        none of their forks. The job's processes are every pid given so far (the sampler's, of
        the job's tree) that still runs or has files, and those that ended (read once, at a
        look for them); a reader never given ``pids`` reads every pid's files. A record or
        file that cannot be read is skipped and named in the view's ``note``. With ``counters``, only the
        loaders and the workers' sample counts (a lean tick's needs), from the files of
        ``pids`` the last full read listed: the processes' JSON
        records are not looked at, except the ones the loaders' views are made from (so no
        ``recording``, RNG checks, execs or failures, of live processes or retired ones). Safe
        from several threads."""
        with self._lock:
            return self._read(pids, forks, counters)

    def _read(self, pids: Optional[Iterable[int]], forks: bool, counters: bool = False) -> InsideView:
        if self.folder is None:
            return InsideView(note=self.why_none)
        pids = None if pids is None else list(pids)
        wanted = None if pids is None else set(pids)
        loaders: List[LoaderView] = []
        fork_list: List[ForkRecord] = []
        rng: List[RngCheck] = []
        fetches: List[WorkerFetch] = []
        execs: List[WorkerExec] = []
        failures: List[WorkerFailure] = []
        ends: List[ProcessEnd] = []
        recording: List[int] = []
        if counters and self._names is not None:
            # a lean tick: only the named pids' files of the last listing (the folder holds
            # every rank's and worker's: a rank's tick must not cost what the node's would)
            names = self._names if wanted is None else [n for pid in wanted for n in self._by_pid.get(pid, ())]
        else:
            try:
                names = self._list()
            except OSError as e:
                return InsideView(note=f"cannot read the inside view's folder {self.folder}: {e.strerror}")
            caller, now = (pids[0] if pids else None), time.monotonic()
            self._sampled[caller] = (now, frozenset(wanted or ()))
            if wanted is not None:
                self._job |= wanted
                self._given = True
            if self.retire and self._retire_due(names, wanted, caller):
                # alive: the pids each caller sampled for its latest full read (this one's now;
                # a caller that has not read for two RETIRE_EVERY_S, a rank that ended, no more)
                self._sampled = {k: v for k, v in self._sampled.items() if now - v[0] <= 2 * RETIRE_EVERY_S}
                kept = self._retire(names, set().union(*(v[1] for v in self._sampled.values())))
                if len(kept) != len(names):
                    self._index(kept)
                    self._listed_mtime = None  # files were removed: list again at the next read
                names = kept
            if not forks and wanted is not None:
                # a rank's tick: its own processes' files only (others' are skipped below)
                names = sorted(n for pid in wanted for n in self._by_pid.get(pid, ()))
        for retired in () if counters else self._retired.values():
            if forks:
                fork_list.extend(retired.forks)
            rng.extend(retired.rng)
            execs.extend(retired.execs)
            failures.extend(retired.failures)
            ends.extend(retired.ends)
        # whose files are read: the job's processes (NOTE [ What the job writes ]); at a rank's
        # tick, its own (the sampler's pids, which a lean tick does not add to _job)
        job = wanted if wanted is not None and not forks else (self._job if self._given else None)
        for name in names:
            stem, _, ext = name.partition(".")
            pid = pid_of(stem)
            if pid is None or ext not in ("bin", "json", "fetch") or (job is not None and pid not in job):
                continue
            if ext == "fetch":
                if wanted is None or pid in wanted:
                    fetch = self._fetch(pid, name)
                    if fetch is not None:
                        fetches.append(fetch)
                continue
            if ext == "json":
                if counters:
                    continue  # a lean tick: the records are not needed now
                doc = self._doc(pid, os.path.join(self.folder, name))
                if doc is not None and not doc.get("disabled") and (wanted is None or pid in wanted):
                    recording.append(pid)
                derived = self._derived.get(pid)
                if derived is None or derived[0] is not doc:
                    derived = (doc, _records(pid, doc))
                    self._derived[pid] = derived
                if forks:
                    fork_list.extend(derived[1].forks)
                rng.extend(derived[1].rng)
                execs.extend(derived[1].execs)
                failures.extend(derived[1].failures)
                ends.extend(derived[1].ends)
                continue
            if wanted is not None and pid not in wanted:
                continue
            try:
                buf = self._counter_bytes(name, FORMAT.FILE_SIZE)
                _, slots = FORMAT.read_slots(buf)
            except (OSError, ValueError, Exception) as e:  # struct.error is an Exception
                self._problems[name] = f"{name}: {e}"
                continue
            self._saw_any = True
            cached = self._docs.get(pid)
            doc = cached[1] if cached is not None else None
            if not (counters and doc is not None and _records_all(doc, slots)):
                # a full read checks the record (:meth:`_doc`); a lean one takes the record it
                # has unless an iterator it counts has none there yet
                doc = self._doc(pid, os.path.join(self.folder, f"{pid}.json"))
            loaders.extend(loader_views(pid, doc, slots, self._views))
        problems = sorted(set(self._problems.values()) | self._retired_problems)
        more = len(problems) - NOTE_PROBLEMS
        note = "; ".join(problems[:NOTE_PROBLEMS]) + (f"; and {more} more" if more > 0 else "") or None
        if not loaders and not fork_list and note is None and not self._saw_any:
            note = "no DataLoader iterator recorded yet"
        return InsideView(
            loaders=tuple(loaders),
            forks=tuple(fork_list),
            note=note,
            rng=tuple(rng),
            fetches=tuple(fetches),
            execs=tuple(execs),
            recording=tuple(recording),
            failures=tuple(failures),
            ends=tuple(ends),
        )

    def _retire_due(self, names: List[str], wanted: Optional[Set[int]], caller: Optional[int]) -> bool:
        """Whether to look for processes that ended now: at every read of the whole folder, when
        a pid the caller (``caller``: the first of its pids, a rank's main) did not sample has
        files that were not there at that caller's last look (a worker of this rank that ended,
        or another rank's new one), else every ``RETIRE_EVERY_S``. The ranks of a job share
        this reader: each rank's files are the others' unsampled ones, so each caller is
        compared with its own last look."""
        now = time.monotonic()
        if wanted is not None:
            unsampled = {n.partition(".")[0] for n in names} - {str(p) for p in wanted}
            before = self._unsampled.get(caller)
            self._unsampled[caller] = unsampled
            if before is not None and unsampled <= before and now - self._retired_at < RETIRE_EVERY_S:
                return False
        self._retired_at = now
        return True

    def _retire(self, names: List[str], live: Set[int]) -> List[str]:
        """Fold the records of processes that ended (no ``/proc/PID``) and wrote no loader file
        (``.bin``: the job's main, read again after it ends) into ``_retired`` and remove their
        files, so that a job that starts workers all week long costs each tick what its live
        processes cost. ``live`` are the pids each caller sampled alive for its latest full
        read (the ranks of a job share this reader, each reads its own every few seconds): not
        looked up again; one of another rank's that ended since is retired at a look after
        that rank's next read. Also forgets the job's pids (:attr:`_job`) that no caller
        sampled lately and that have no files, and what is kept of pids without files. Returns
        the names still in the folder."""
        owners = {n.partition(".")[0] for n in names if n.endswith(".bin")}
        gone: Dict[int, List[str]] = {}
        for name in names:
            stem, _, ext = name.partition(".")
            pid = pid_of(stem)
            if (
                pid is not None
                and stem not in owners
                and ext in ("json", "fetch")
                and pid not in live
                and not _alive(stem)
            ):
                gone.setdefault(pid, []).append(name)
        listed = set(names)
        self._problems = {n: why for n, why in self._problems.items() if n in listed}
        have = {pid_of(n.partition(".")[0]) for n in names} - set(gone)
        self._job = {p for p in self._job if p in live or p in have}
        for pid in [p for p in self._docs if p not in have and p not in gone]:
            self._forget(pid)
        if not gone:
            return names
        for pid, files in gone.items():
            doc = self._doc(pid, os.path.join(self.folder or "", f"{pid}.json")) if f"{pid}.json" in files else None
            problem = "; ".join(self._problems.pop(n) for n in (f"{pid}.json", f"{pid}.fetch") if n in self._problems)
            weight = self._weights.get(pid, 0)
            old = self._retired.pop(pid, None)
            self._retired_weight += weight - (old.weight if old is not None else 0)
            self._retired[pid] = _records(pid, doc)._replace(problem=problem or None, weight=weight)
            while len(self._retired) > RETIRED_KEPT or self._retired_weight > RETIRED_MAX_WEIGHT:
                self._retired_weight -= self._retired.popitem(last=False)[1].weight
            self._forget(pid)
            for name in files:
                try:
                    os.unlink(os.path.join(self.folder or "", name))  # never follows a link: the name goes
                except OSError:
                    pass
        self._retired_problems = {r.problem for r in self._retired.values() if r.problem}
        removed = {n for files in gone.values() for n in files}
        return [n for n in names if n not in removed]

    def _fetch(self, pid: int, name: str) -> Optional[WorkerFetch]:
        try:
            samples, last_ns = FORMAT.read_fetch(self._counter_bytes(name, FORMAT.FETCH.size))
        except (OSError, ValueError) as e:
            self._problems[name] = f"{name}: {e}"
            return None
        return WorkerFetch(pid, int(samples), last_ns / 1e9 if last_ns else None)
