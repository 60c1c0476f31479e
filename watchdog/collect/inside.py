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

The folder and the job's environment are made in :mod:`watchdog.collect.hook_folder`, the records
decoded in :mod:`watchdog.collect.inside_records`; their public names are importable from here too.
"""

from __future__ import annotations

import collections
import errno
import os
import stat
import tempfile  # noqa: F401  (make_folder's temporary directory: tests set tempfile.tempdir through here)
import threading
import time
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Set, Tuple

from ..safefiles import safe_parent
from ..types import (
    ForkRecord,
    InsideView,
    LoaderView,
    ProcessEnd,
    RngCheck,
    WorkerExec,
    WorkerFailure,
    WorkerFetch,
)
from .hook_folder import (
    BOOT_DIR,
    FORMAT,
    HOOK_PREFIX,
    STALE_HOOK_S,
    TOKEN_ENV,
    TOKEN_FILE,
    HookFolder,
    folder_of,
    hook_env,
    is_hook_folder,
    make_folder,
    read_regular,
    remove_folder,
    sweep_stale_folders,
)
from .inside_records import (
    RECORD_MAX_BYTES,
    LoaderCache,
    end_record,
    exec_record,
    failure_records,
    fork_records,
    loader_views,
    parse_record,
    percentile_s,
    pid_of,
    rng_check,
)

__all__ = [
    "BOOT_DIR",
    "FORMAT",
    "ForkRecord",
    "HELD_MAX",
    "HOOK_PREFIX",
    "HookFolder",
    "InsideReader",
    "InsideView",
    "LoaderCache",
    "LoaderView",
    "NOTE_PROBLEMS",
    "ProcessEnd",
    "RECORDS_MAX_WEIGHT",
    "RECORD_MAX_BYTES",
    "RETIRED_KEPT",
    "RETIRED_MAX_WEIGHT",
    "RETIRE_EVERY_S",
    "RngCheck",
    "STALE_HOOK_S",
    "TOKEN_ENV",
    "TOKEN_FILE",
    "WorkerExec",
    "WorkerFailure",
    "WorkerFetch",
    "end_record",
    "exec_record",
    "failure_records",
    "folder_of",
    "fork_records",
    "hook_env",
    "is_hook_folder",
    "loader_views",
    "make_folder",
    "parse_record",
    "percentile_s",
    "pid_of",
    "read_regular",
    "remove_folder",
    "rng_check",
    "safe_parent",
    "sweep_stale_folders",
]


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
# (``RECORD_MAX_BYTES`` and the typed decoding: watchdog/collect/inside_records.py.)

# Estimated bytes of Python objects (:func:`_weight`) of the records of live processes kept in
# all, and of those of processes that ended (``_retired``): the busy job's record (of
# RECORD_MAX_BYTES' comment) took 4.5 MiB once parsed (tracemalloc; 7.4 MiB estimated), a usual
# one (2 iterators, 2 threads) some 30 KiB.
RECORDS_MAX_WEIGHT = 64 << 20
RETIRED_MAX_WEIGHT = 16 << 20
# Counter files held open at most (the least recently read is closed; it is opened again when
# read): a node of 8 ranks of 16 workers holds 136.
HELD_MAX = 256
# Problems named in a view's note at most (then how many more).
NOTE_PROBLEMS = 8


def _weight(data: bytes) -> int:
    """An estimate (bytes) of the Python objects a parsed record ``data`` holds, from its
    bytes and the counts of its strings, objects, arrays and items (CPython 3.11's sizes: a
    string object 49 bytes and up, a small dict 184, a list 56 and 8 a slot): a record of short
    strings weighs many times its size."""
    return len(data) + 28 * data.count(b'"') + 184 * data.count(b"{") + 56 * data.count(b"[") + 8 * data.count(b",")


# Records of ended processes kept after their files are removed (:meth:`InsideReader._retire`).
RETIRED_KEPT = 256
# Seconds between two looks for processes that ended (InsideReader._retire), for the reader
# the ranks of a job share: each look checks every pid of the folder that its caller did not
# sample (the other ranks' and their workers').
RETIRE_EVERY_S = 5.0
# Seconds a caller's sampled pids count as alive after its full read (InsideReader._retire): a
# rank reads fully at least every min(warning_interval_s, stall_timeout_s / 2), 15 s by default,
# while its loader delivers (NOTE [ Lean ticks ] in watchdog/collect/read_plan.py; longer
# settings only cost lookups); a rank that ended reads no more, and its pids are looked up in
# /proc again once this has passed.
SAMPLED_KEPT_S = 60.0


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
                # a caller that has not read for SAMPLED_KEPT_S, a rank that ended, no more)
                self._sampled = {k: v for k, v in self._sampled.items() if now - v[0] <= SAMPLED_KEPT_S}
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
        read (the ranks of a job share this reader, each reads its own every 15 s or so): not
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
