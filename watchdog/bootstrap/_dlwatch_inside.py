"""The recorder that runs inside the job's Python processes (armed by dlwatch's ``sitecustomize``).

What it records, per DataLoader iterator (``torch.utils.data.dataloader._BaseDataLoaderIter``):
where it was created and its settings, batches delivered, the time main spent inside
``__next__``, a histogram of the intervals between batches, and the batch index (and the worker
that owns it) that main is waiting for; and, when the iterator forks its workers, every thread of
the forking process with its Python stack.
In a process that ``multiprocessing`` started (not a DataLoader worker): how it ended, its exit
code and uncaught exception (``_on_mp_end``), so that a wait on it can name how it died.

How it stays out of the job's way:

* Standard library only; nothing happens until the job imports ``torch.utils.data.dataloader``.
* No wrapper functions: a wrapper's frame would show in every traceback that passes through it
  and change the job's stderr. Instead, two attributes that PyTorch itself reads or writes at
  the right moments become data descriptors of ``_BaseDataLoaderIter``: ``_profile_name`` (read
  once at the top of ``__next__``, set last in ``__init__``) and ``_num_yielded`` (set after
  each batch, reset to 0 at each epoch start), in torch/utils/data/dataloader.py. An epoch that
  ends (StopIteration) leaves "in ``__next__``" set until the next event: the sidecar checks
  it against main's own thread before it counts as waiting. The data checks (off with
  ``DLWATCH_DATA_CHECKS=0``) do the same with ``_BaseDatasetFetcher.drop_last`` (set last
  when a worker creates its fetcher, after seeding and ``worker_init_fn``) and
  ``_BaseDatasetFetcher.dataset`` (read once a sample; counted for the first
  ``RNG_RECHECK_AFTER`` samples only), in torch/utils/data/_utils/fetch.py. A worker whose
  fetch raises is seen through ``ExceptionWrapper.where`` (set last in its ``__init__``,
  torch/_utils.py): it records the failed batch and sample index (``failed`` in its JSON).
  Their getters and setters return normally, so no traceback ever holds one of our frames.
  The fork-time record is an ``os.register_at_fork(before=…)`` handler.
* Hot path (two calls per batch): ``struct.pack_into`` on a shared ``mmap`` of a small file;
  no system call, no lock, no thread. The sidecar reads the file at its own pace; a sequence
  counter per slot (odd while being written) lets it skip a torn read.
* Rare events (an iterator created, its workers started, the process exiting) rewrite a small
  JSON file atomically (temp file + rename).
* Any error disables the recorder in that process and writes the reason for the sidecar.
* One thing it adds to the job: in each worker, ``faulthandler`` for fatal signals (off with
  ``DLWATCH_FAULTHANDLER=0``), so that a worker killed by SIGSEGV, SIGBUS or SIGABRT leaves
  the Python line it died in on stderr.

Files, in the private 0700 folder ``$DLWATCH_HOOK_DIR``: ``<pid>.bin`` (``FILE_SIZE`` bytes:
``HEADER`` then ``SLOTS`` slots of ``SLOT_SIZE`` bytes: ``SLOT`` fields then ``BUCKETS``
little-endian uint32 counts), ``<pid>.json``, and, in a process that fetches samples (a
DataLoader worker), ``<pid>.fetch`` (``FETCH`` fields: how many times the fetcher reached for a
sample, and when last). That count is the sidecar's measure of a worker's progress: a worker
that polls, sleeps or retries inside one sample never raises it (NOTE [ Hang criterion ] in
``watchdog/detect/progress.py``). It is kept on every read of ``_BaseDatasetFetcher.dataset`` (map-style:
once a sample, twice more per batch) and of ``_IterableDatasetFetcher.dataset_iter``
(iterable-style: once a sample), whether or not the data checks are on. Times are ``CLOCK_MONOTONIC`` nanoseconds
(``time.monotonic_ns``), comparable with the sidecar's ``time.monotonic``.
"""

import json
import mmap
import os
import struct
import sys
import threading
import time

TYPE_CHECKING = False  # mypy reads the block below; at run time typing is never imported here
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Dict, List, Optional

ENV_DIR = "DLWATCH_HOOK_DIR"
ENV_ANCESTOR = "DLWATCH_HOOK_ANCESTOR"
ENV_CHECKS = "DLWATCH_DATA_CHECKS"  # "0": no data-correctness checks
ENV_FAULTHANDLER = "DLWATCH_FAULTHANDLER"  # "0": leave faulthandler off in workers
TARGET = "torch.utils.data.dataloader"

MAGIC = b"DLWH"
VERSION = 1
HEADER = struct.Struct("<4sIII")  # magic, version, pid, slots
HEADER_SIZE = 64
SLOTS = 8
# seq, iterator id, batches, wait ns, in __next__ since (ns, 0: not waiting), last batch at (ns),
# waited-for batch index, its worker id (-1: unknown), epoch, first batch's latency (ns)
SLOT = struct.Struct("<QQQQQQqqQQ")
BUCKETS = 128
HIST = struct.Struct("<%dI" % BUCKETS)
SLOT_SIZE = 640
FILE_SIZE = HEADER_SIZE + SLOTS * SLOT_SIZE
MAX_ITERATORS = 16  # iterators kept in the JSON record
MAX_THREADS = 64  # threads recorded at fork
MAX_FRAMES = 40  # frames per thread recorded at fork
CUDA_EVERY_NS = 5 * 10**9  # how often, while batches flow, the CUDA host allocator's stats are read
RNG_RECHECK_AFTER = 32  # samples a worker fetches before its RNG states are read again
MAX_RNG_ATTRIBUTES = 64  # Dataset attributes looked at for random generators
MAX_FAILED = 8  # failed batches a worker records
FIRST_RECORDS = 32  # records of each worker's stream fingerprinted (an IterableDataset with several workers)
FIRST_CHECK_BATCHES = 2 * FIRST_RECORDS  # batches per worker after which that check gives up
MAX_FAILED_INDICES = 64  # sample indices recorded of a failed batch
MAX_ENDED_TEXT = 300  # characters kept of the exception line (and name) of a process that ended

# samples reached for (reads of the fetcher's dataset or iterator), when last (ns)
FETCH = struct.Struct("<QQ")

_OFF_SEQ, _OFF_ID, _OFF_BATCHES = 0, 8, 16
_OFF_SINCE, _OFF_IDX = 32, 48
_OFF_EPOCH = 64
_OFF_HIST = SLOT.size
_Q = struct.Struct("<Q")
_QQQQ = struct.Struct("<QQQQ")
_QQQ = struct.Struct("<QQQ")
_QQ = struct.Struct("<qq")
_I = struct.Struct("<I")


def bucket_of(ns):
    """Histogram bucket of an interval of ``ns`` nanoseconds: four buckets per power of two of
    microseconds, from 1 µs (bucket 0) to about 36 minutes (bucket ``BUCKETS - 1``)."""
    us = ns // 1000
    if us < 1:
        return 0
    b = us.bit_length() - 1
    sub = (us >> (b - 2)) & 3 if b >= 2 else (us << (2 - b)) & 3
    return min(4 * b + sub, BUCKETS - 1)


def bucket_bounds_s(index):
    """``(low, high)`` in seconds of the intervals counted in bucket ``index``."""
    b, sub = divmod(index, 4)
    return ((4 + sub) << b) / 4e6, ((5 + sub) << b) / 4e6


def read_fetch(buf):
    """Parse a ``<pid>.fetch`` buffer (bytes-like): ``(samples, last_ns)``.

    Raises:
        ValueError: shorter than ``FETCH``.
    """
    if len(buf) < FETCH.size:
        raise ValueError("a fetch counter file of %d bytes (want %d)" % (len(buf), FETCH.size))
    return FETCH.unpack_from(buf, 0)


def read_slots(buf):
    """Parse a ``<pid>.bin`` buffer (bytes-like, ``FILE_SIZE`` bytes).

    Returns ``(pid, slots)``: ``slots`` is a list of dicts (``iterator``, ``batches``,
    ``wait_ns``, ``since_ns``, ``last_ns``, ``waiting_idx``, ``waiting_worker``, ``epoch``,
    ``first_ns``, ``hist``) for the slots in use whose read was consistent.

    Raises:
        ValueError: not a recorder file of this version.
    """
    magic, version, pid, slots = HEADER.unpack_from(buf, 0)
    if magic != MAGIC or version != VERSION or slots != SLOTS or len(buf) < FILE_SIZE:
        raise ValueError("not a dlwatch recorder file of version %d" % VERSION)
    out = []
    for i in range(SLOTS):
        off = HEADER_SIZE + i * SLOT_SIZE
        for _ in range(3):
            fields = SLOT.unpack_from(buf, off)
            hist = HIST.unpack_from(buf, off + _OFF_HIST)
            if fields[0] % 2 == 0 and _Q.unpack_from(buf, off)[0] == fields[0]:
                break
        else:
            continue  # being written three times in a row: skip it this time
        if not fields[1]:
            continue
        keys = (
            "seq",
            "iterator",
            "batches",
            "wait_ns",
            "since_ns",
            "last_ns",
            "waiting_idx",
            "waiting_worker",
            "epoch",
            "first_ns",
        )
        rec = dict(zip(keys, fields))
        rec["slot"] = i
        rec["hist"] = hist
        out.append(rec)
    return pid, out


class _Slot(object):
    """One iterator's counters in the shared file; written by the thread that iterates it."""

    __slots__ = (
        "buf",
        "off",
        "seq",
        "batches",
        "wait_ns",
        "since",
        "last",
        "epoch",
        "created",
        "first",
        "counts",
        "epoch_batches",
        "cuda_next",
        "worker",
        "owners",
        "streams",
    )

    def __init__(self, buf, index, iterator_id):
        self.buf, self.off = buf, HEADER_SIZE + index * SLOT_SIZE
        self.seq = _Q.unpack_from(buf, self.off)[0] | 1
        self.batches = self.wait_ns = self.since = self.last = self.epoch = self.first = self.epoch_batches = 0
        self.cuda_next = 0  # when to look at CUDA's host allocator next (ns)
        self.worker = -1  # the worker that owns the batch main waits for
        self.owners = None  # while the first records are fingerprinted: {batch index: worker} at __next__'s entry
        self.streams = None  # {worker id: [blake2b of its batches, records]} of the streams being fingerprinted
        self.created = time.monotonic_ns()
        self.counts = [0] * BUCKETS
        buf[self.off : self.off + SLOT_SIZE] = bytes(SLOT_SIZE)
        _Q.pack_into(buf, self.off, self.seq)
        SLOT.pack_into(buf, self.off, self.seq, iterator_id, 0, 0, 0, 0, -1, -1, 0, 0)
        self._done()

    def _begin(self):
        self.seq += 1 if self.seq % 2 == 0 else 2
        _Q.pack_into(self.buf, self.off, self.seq)

    def _done(self):
        self.seq += 1
        _Q.pack_into(self.buf, self.off, self.seq)

    def enter(self, idx, worker):
        """Main entered ``__next__``, waiting for batch ``idx`` of worker ``worker``."""
        now = time.monotonic_ns()
        self.since, self.worker = now, worker
        self._begin()
        _Q.pack_into(self.buf, self.off + _OFF_SINCE, now)
        _QQ.pack_into(self.buf, self.off + _OFF_IDX, idx, worker)
        self._done()

    def delivered(self):
        """``__next__`` returned a batch."""
        now = time.monotonic_ns()
        self.batches += 1
        self.epoch_batches += 1
        if self.since:
            self.wait_ns += now - self.since
        self._begin()
        if self.last:
            b = bucket_of(now - self.last)
            self.counts[b] += 1
            _I.pack_into(self.buf, self.off + _OFF_HIST + 4 * b, self.counts[b])
        elif not self.first:
            self.first = now - self.created
            _Q.pack_into(self.buf, self.off + 72, self.first)
        self.last, self.since = now, 0
        _QQQQ.pack_into(self.buf, self.off + _OFF_BATCHES, self.batches, self.wait_ns, 0, now)
        self._done()

    def stopped(self, new_epoch):
        """Not waiting any more: the epoch ended, the workers were shut down, or (``new_epoch``)
        the iterator was reset for the next epoch; the first batch of an epoch is not an interval."""
        if new_epoch and self.epoch_batches:
            self.epoch += 1
            self.epoch_batches = 0
        self.since = self.last = 0
        self._begin()
        _QQQ.pack_into(self.buf, self.off + _OFF_SINCE, 0, 0, 0)
        _Q.pack_into(self.buf, self.off + _OFF_EPOCH, self.epoch)
        self._done()


class _Process(object):
    """The recorder's state in one process (a forked child starts its own). The counters' file
    is created with the first iterator: a worker that only fetches writes its JSON record only."""

    def __init__(self, folder):
        self.pid = os.getpid()
        self.folder = folder
        self.lock = threading.Lock()
        self.next_id = 1
        self.iterators = []  # JSON records, oldest first
        self.workers = {}  # iterator id -> its multiprocessing.Process objects, for exit codes
        self.worker = None  # in a DataLoader worker: its id and the RNG states it started with
        self.buf = None
        self.exec_ = None  # what this worker exec'd and from where, just before it did
        self.fetch = None  # the mmap of <pid>.fetch, once this process fetches samples
        self.fetched = 0
        self.failed = []  # in a worker: the batches whose fetch raised (_on_exception_wrapped)
        self.ended = None  # in a multiprocessing.Process other than a worker: how it ended (_on_mp_end)

    def fetched_one(self):
        """The fetcher reached for a sample: count it in ``<pid>.fetch`` (two stores, no system
        call after the first)."""
        buf = self.fetch
        if buf is None:
            path = os.path.join(self.folder, "%d.fetch" % self.pid)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                os.ftruncate(fd, FETCH.size)
                buf = self.fetch = mmap.mmap(fd, FETCH.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        self.fetched += 1
        FETCH.pack_into(buf, 0, self.fetched, time.monotonic_ns())

    def _map(self):
        path = os.path.join(self.folder, "%d.bin" % self.pid)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            os.ftruncate(fd, FILE_SIZE)
            buf = mmap.mmap(fd, FILE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        HEADER.pack_into(buf, 0, MAGIC, VERSION, self.pid, SLOTS)
        self.buf = buf

    def new_iterator(self, record):
        with self.lock:
            if self.buf is None:
                self._map()
            iterator_id = self.next_id
            self.next_id += 1
            index = (iterator_id - 1) % SLOTS
            record["id"], record["slot"] = iterator_id, index
            self.iterators = [
                r for r in self.iterators if r.get("slot") != index or r.get("id", 0) <= iterator_id - SLOTS
            ]
            self.iterators.append(record)
            del self.iterators[:-MAX_ITERATORS]
            kept = {r["id"] for r in self.iterators}
            self.workers = {k: v for k, v in self.workers.items() if k in kept}
        return _Slot(self.buf, index, iterator_id)

    def write_json(self, disabled=None):
        doc = {
            "pid": self.pid,
            "ppid": os.getppid(),
            "python": sys.version.split()[0],
            "torch": getattr(sys.modules.get("torch"), "__version__", None),
            "disabled": disabled,
            "iterators": self.iterators,
            "worker": self.worker,
            "exec": self.exec_,
            "failed": self.failed,
            "ended": self.ended,
        }
        for record in self.iterators:
            workers = self.workers.get(record["id"])
            if workers is not None:
                # The exit code multiprocessing already has (Popen.returncode), never a new
                # waitpid: reaping a worker is PyTorch's business.
                record["worker_exitcodes"] = [getattr(getattr(w, "_popen", None), "returncode", None) for w in workers]
        _write_atomic(os.path.join(self.folder, "%d.json" % self.pid), doc)


def _write_atomic(path, doc):
    tmp = "%s.%d.tmp" % (path, threading.get_ident())
    data = json.dumps(doc, default=lambda o: None, separators=(",", ":")).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


_FOLDER = None
_CHECKS = os.environ.get(ENV_CHECKS, "1") != "0"
_STATE = None
_DISABLED = None
_TORCH_DIR = None
_MP_INIT_CODE = None
_FIX = None  # the fix of a dlwatch verify run, as applied (_dlwatch_fix)


def _state():
    global _STATE
    st = _STATE
    if st is None or st.pid != os.getpid():
        st = _STATE = _Process(_FOLDER)
    return st


def _disable(reason):
    """Stop recording in this process and leave the reason for the sidecar."""
    global _DISABLED
    if _DISABLED is None:
        _DISABLED = reason
        try:
            _state().write_json(disabled=reason)
        except Exception:
            pass


def _function(code):
    """A code object's qualified name (``Live._refresh``; CPython 3.11's ``co_qualname``, as
    py-spy names frames), its bare name before 3.11."""
    return getattr(code, "co_qualname", None) or code.co_name


def _outside_torch(frame):
    """The innermost frame outside torch's package and this file: where the user's code called in."""
    here = __file__.rstrip("c")
    while frame is not None:
        name = frame.f_code.co_filename
        if not (_TORCH_DIR and name.startswith(_TORCH_DIR)) and name.rstrip("c") != here:
            return {"file": name, "line": frame.f_lineno, "function": _function(frame.f_code)}
        frame = frame.f_back
    return None


def _code_site(cls, name):
    """Where ``cls.name`` (the Dataset's ``__getitem__`` or ``__iter__``) is defined, when it
    is a Python function: the line a worker's fetch runs in, for a death that leaves no stack."""
    code = getattr(getattr(cls, name, None), "__code__", None)
    if code is None:
        return None
    return {"file": code.co_filename, "line": code.co_firstlineno, "function": _function(code)}


def _qualname(obj):
    if obj is None:
        return None
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


def _start_method(context):
    import multiprocessing

    if context is None:
        # allow_none: asking without it would fix the start method for the whole job.
        return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if isinstance(context, str):
        return context
    get = getattr(context, "get_start_method", None)
    return get() if get is not None else str(context)


def _loader_of(frame):
    """The ``DataLoader`` being iterated: ``loader`` in ``_BaseDataLoaderIter.__init__``'s frame."""
    for _ in range(4):
        if frame is None:
            return None
        loader = frame.f_locals.get("loader") if frame.f_code.co_name == "__init__" else None
        if loader is not None:
            return loader
        frame = frame.f_back
    return None


def _created(it):
    """An iterator finished ``_BaseDataLoaderIter.__init__`` (it set ``_profile_name``)."""
    frame = sys._getframe(2)
    loader = _loader_of(frame)
    settings: Dict[str, Any] = {}
    if loader is not None:
        for key in (
            "num_workers",
            "pin_memory",
            "persistent_workers",
            "prefetch_factor",
            "batch_size",
            "timeout",
            "drop_last",
            "in_order",
        ):
            value = getattr(loader, key, None)
            settings[key] = value if isinstance(value, (bool, int, float, str)) or value is None else str(value)
        settings["multiprocessing_context"] = (
            _start_method(getattr(loader, "multiprocessing_context", None)) if loader.num_workers else None
        )
        init = getattr(loader, "worker_init_fn", None)
        fixed = getattr(sys.modules.get("_dlwatch_fix"), "ThreadsAfterInit", None)  # a verify run's fix
        if fixed is not None and init is not None and type(init) is fixed:
            settings["worker_threads"] = init.dlwatch_worker_threads
            init = init.own
        settings["worker_init_fn"] = _qualname(init)
        settings["collate_fn"] = _qualname(getattr(loader, "collate_fn", None))
        settings["sampler"] = _qualname(type(getattr(loader, "sampler", None)))
    dataset = it.__dict__.get("_dataset")
    record = {
        "kind": type(it).__name__,
        "created_ns": time.monotonic_ns(),
        "created_wall": time.time(),
        "site": _outside_torch(frame),
        "settings": settings,
        "pin_memory_effective": it.__dict__.get("_pin_memory"),
        "dataset": {
            "type": _qualname(type(dataset)),
            "module": type(dataset).__module__,
            "code": _code_site(type(dataset), "__iter__" if it.__dict__.get("_dataset_kind") == 1 else "__getitem__"),
        },
        "iterable": it.__dict__.get("_dataset_kind") == 1,
        "workers": None,
        "threads_at_fork": None,
        "check_first_batches": _CHECKS
        and it.__dict__.get("_dataset_kind") == 1
        and (settings.get("num_workers") or 0) > 1,
    }
    st = _state()
    slot = st.new_iterator(record)
    it.__dict__["_dlwatch"] = (slot, record)
    st.write_json()


def _record_of(it):
    entry = it.__dict__.get("_dlwatch")
    if entry is None or _DISABLED is not None:
        return None
    return entry


def _entered(it):
    entry = _record_of(it)
    if entry is None:
        return
    slot, record = entry
    d = it.__dict__
    if record["workers"] is None and d.get("_workers"):
        workers = d["_workers"]
        record["workers"] = [getattr(w, "pid", None) for w in workers]
        st = _state()
        st.workers[record["id"]] = list(workers)
        st.write_json()
    idx = d.get("_rcvd_idx", d.get("_num_yielded", 0))
    info = d.get("_task_info")
    owner = info.get(idx) if info else None
    slot.enter(idx, owner[0] if owner else -1)
    if info and record.get("check_first_batches"):
        slot.owners = {k: v[0] for k, v in info.items()}
    if slot.since >= slot.cuda_next:
        slot.cuda_next = slot.since + CUDA_EVERY_NS
        if _cuda_refresh(it, record):
            _state().write_json()


def _cuda_refresh(it, record):
    """Once CUDA is initialised (never initialise it here): PyTorch's caching host allocator
    statistics (``torch.cuda.host_memory_stats``, torch >= 2.7, numbers only) and whether the
    pin-memory thread runs. Returns whether anything was recorded."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return False
    out: Dict[str, Any] = {}
    stats = getattr(cuda, "host_memory_stats", None)
    if stats is not None:
        out["host_memory_stats"] = {
            k: v for k, v in stats().items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
    thread = it.__dict__.get("_pin_memory_thread")
    out["pin_thread_alive"] = thread.is_alive() if thread is not None else None
    record["cuda"] = out
    return True


class _Attribute(object):
    """A data descriptor standing in for one instance attribute (of ``_BaseDataLoaderIter``,
    ``_BaseDatasetFetcher`` or ``ExceptionWrapper``); it keeps the value where Python would, in the instance's
    ``__dict__`` under the attribute's own name (so ``vars()`` and code that fills ``__dict__``
    directly see no difference), and tells the recorder when it is read or written. PyTorch sets
    these attributes in ``__init__`` before any read, so the AttributeError branch is there
    for completeness only."""

    def __init__(self, name, on_get=None, on_set=None):
        self.key = name
        self.on_get, self.on_set = on_get, on_set

    def __get__(self, it, owner=None):
        if it is None:
            return self
        try:
            value = it.__dict__[self.key]
        except KeyError:
            raise AttributeError("%r object has no attribute %r" % (type(it).__name__, self.key)) from None
        if self.on_get is not None and _DISABLED is None:
            try:
                self.on_get(it)
            except Exception as e:
                _disable("%s: %r" % (self.key, e))
        return value

    def __set__(self, it, value):
        it.__dict__[self.key] = value
        if self.on_set is not None and _DISABLED is None:
            try:
                self.on_set(it, value)
            except Exception as e:
                _disable("%s: %r" % (self.key, e))

    def __delete__(self, it):
        try:
            del it.__dict__[self.key]
        except KeyError:
            raise AttributeError(self.key) from None


def _on_profile_name_set(it, _value):
    if "_dlwatch" not in it.__dict__:
        _created(it)


def _on_num_yielded_set(it, value):
    entry = _record_of(it)
    if entry is None:
        return
    if value:
        entry[0].delivered()
        if entry[1].get("check_first_batches"):
            try:
                _first_batch(it, entry[0], entry[1])
            except Exception as e:  # a check's failure stops that check only
                entry[1]["check_first_batches"] = False
                entry[1]["check_error"] = repr(e)
    else:
        entry[0].stopped(new_epoch=True)


def _digest(data):
    import hashlib

    return hashlib.blake2b(data if isinstance(data, bytes) else repr(data).encode(), digest_size=8).hexdigest()


def fingerprint(obj):
    """A short digest of a batch: each tensor's shape, dtype and first 256 values, and, for a
    tensor of several records (rows of its first dimension), the first 4 and 4 evenly spaced
    values of each of its first 32 rows (CPU tensors only; a GPU tensor by shape and dtype), and
    plain values, through lists, tuples and dicts (16 items, 4 levels at most). Equal batches
    give equal digests; batches that share only their first record do not."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)

    def walk(o, depth):
        if depth > 4:
            return
        if hasattr(o, "detach") and hasattr(o, "reshape") and hasattr(o, "shape"):
            shape = tuple(o.shape)
            h.update(repr((shape, str(getattr(o, "dtype", "")))).encode())
            if getattr(getattr(o, "device", None), "type", "cpu") == "cpu":
                flat = o.detach().reshape(-1)
                h.update(repr(flat[:256].tolist()).encode())
                if len(shape) > 1 and shape[0] > 1 and flat.numel():
                    rows = flat.reshape(shape[0], -1)[:32]
                    step = max(1, rows.shape[1] // 4)
                    h.update(repr((rows[:, :4].tolist(), rows[:, ::step][:, :4].tolist())).encode())
        elif isinstance(o, (list, tuple)):
            h.update(b"[")
            for x in o[:16]:
                walk(x, depth + 1)
        elif isinstance(o, dict):
            for k in sorted(o, key=str)[:16]:
                h.update(str(k).encode())
                walk(o[k], depth + 1)
        elif o is None or isinstance(o, (str, bytes, int, float, bool)):
            h.update(repr(o)[:256].encode())
        else:
            h.update(type(o).__qualname__.encode())

    walk(obj, 0)
    return h.hexdigest()


def _delivered_by(it, owners):
    """The worker id whose batch ``__next__`` just delivered, from ``owners`` (``_task_info``'s
    batch index -> worker id at ``__next__``'s entry), or ``None`` when it cannot be told. In
    order (``in_order``, the default), the batch delivered is ``_rcvd_idx - 1``
    (``_MultiProcessingDataLoaderIter._next_data`` advances it past the batch it returns,
    torch/utils/data/dataloader.py); out of order, the one batch of a worker still active that
    left ``_task_info``. The worker that owned the batch main first waited for is not it when
    that worker's stream ended meanwhile (an ``IterableDataset`` whose worker yields nothing)."""
    d = it.__dict__
    info = d.get("_task_info") or {}
    if d.get("_in_order", True):
        idx = d.get("_rcvd_idx", 0) - 1
        return owners.get(idx) if idx not in info else None
    status = d.get("_workers_status") or ()
    gone = {w for k, w in owners.items() if k not in info and 0 <= w < len(status) and status[w]}
    return gone.pop() if len(gone) == 1 else None


def _first_batch(it, slot, record):
    """An IterableDataset with several workers: a digest of each worker's first
    ``FIRST_RECORDS`` records (epoch 0; the batches it delivered, from ``data`` in
    ``__next__``'s frame, each of ``batch_size`` records), or of all it yielded when its stream
    ended before (``_workers_status``), written as ``<digest>/<records>``; equal digests across
    workers mean every worker replays the same stream (pytorch/pytorch#30599). Streams sharded
    per worker that only begin alike differ within those records or in their length; a worker
    that yielded nothing has no digest. Runs only until each worker has one (at most
    ``FIRST_CHECK_BATCHES`` batches per worker): one dict copy and one batch digest a batch."""
    owners, slot.owners = slot.owners, None
    workers = int(record["settings"].get("num_workers") or 0)
    seen = record.setdefault("first_batches", {})
    streams = slot.streams
    if streams is None:
        streams = slot.streams = {}
    if slot.epoch or slot.batches > FIRST_CHECK_BATCHES * workers:
        record["check_first_batches"] = False
        slot.streams = None
        return
    frame = sys._getframe(3)  # _first_batch <- _on_num_yielded_set <- __set__ <- __next__
    if owners is None or frame.f_code.co_name != "__next__":
        return
    worker = _delivered_by(it, owners)
    done = len(seen)
    if worker is not None and str(worker) not in seen:
        acc = streams.get(worker)
        if acc is None:
            import hashlib

            acc = streams[worker] = [hashlib.blake2b(digest_size=8), 0]
        acc[0].update(fingerprint(frame.f_locals.get("data")).encode())
        acc[1] += int(record["settings"].get("batch_size") or 1)
        if acc[1] >= FIRST_RECORDS:
            seen[str(worker)] = "%s/%d" % (acc[0].hexdigest(), acc[1])
    status = it.__dict__.get("_workers_status") or ()
    ended = 0
    for w, acc in streams.items():
        if str(w) not in seen and 0 <= w < len(status) and not status[w]:
            seen[str(w)] = "%s/%d" % (acc[0].hexdigest(), acc[1])  # its whole stream, shorter
    for w in range(min(workers, len(status))):
        if str(w) not in seen and not status[w]:
            ended += 1  # ended without a record
    if len(seen) + ended >= workers:
        record["check_first_batches"] = False
        slot.streams = None
    if len(seen) != done:
        _state().write_json()


def _rng_states(dataset):
    """Digests of the random generators a worker would draw from: ``random``'s and numpy's
    global ones, and ``random.Random``, numpy ``Generator``/``RandomState`` and ``torch.Generator``
    objects held by the Dataset's attributes."""
    import random

    out = {"random (global)": _digest(random.getstate())}
    np = sys.modules.get("numpy")
    if np is not None:
        state = np.random.get_state()
        out["numpy.random (global)"] = _digest(state[1].tobytes() + repr(state[2:]).encode())
    torch = sys.modules.get("torch")
    attrs = getattr(dataset, "__dict__", None) or {}
    for name, value in list(attrs.items())[:MAX_RNG_ATTRIBUTES]:
        key = "%s.%s (%s)" % (type(dataset).__name__, name, type(value).__qualname__)
        if isinstance(value, random.Random):
            out[key] = _digest(value.getstate())
        elif np is not None and isinstance(value, np.random.Generator):
            out[key] = _digest(value.bit_generator.state)
        elif np is not None and isinstance(value, np.random.RandomState):
            state = value.get_state()
            out[key] = _digest(state[1].tobytes() + repr(state[2:]).encode())
        elif torch is not None and isinstance(value, getattr(torch, "Generator", ())):
            out[key] = _digest(bytes(value.get_state().tolist()))  # type: ignore[union-attr]  # isinstance of a run-time class
    return out


def _worker_info():
    module = sys.modules.get("torch.utils.data._utils.worker")
    get = getattr(module, "get_worker_info", None)
    return get() if get is not None else None


def _on_fetcher_ready(fetcher, _value):
    """A DataLoader worker created its fetcher (``_BaseDatasetFetcher.__init__`` set
    ``drop_last``, last): after PyTorch seeded it and after ``worker_init_fn``. Record the
    states of its random generators; :func:`_on_sample` records them again later.

    Once per worker process: a persistent worker (``persistent_workers=True``) makes a new
    fetcher at each epoch (``_ResumeIteration`` in torch/utils/data/_utils/worker.py), and its
    generators go on from where the last epoch left them, so the first epoch's states are the
    ones the check compares (workers seeded alike show it there). Recording every epoch
    rewrote each worker's ``<pid>.json`` twice an epoch, and the sidecar lists the folder and
    checks each record again after every change: on a node of 8 ranks x 8 workers, most of
    what reading the inside view cost."""
    info = _worker_info()
    if info is None:
        return  # num_workers=0: the main process fetches
    st = _state()
    if st.worker is not None and st.worker.get("id") == info.id:
        return  # a persistent worker's next epoch: recorded at its first
    st.worker = {
        "id": info.id,
        "num_workers": info.num_workers,
        "seed": info.seed,
        "rng_start": None,
        "rng_later": None,
    }
    try:
        st.worker["rng_start"] = _rng_states(fetcher.__dict__.get("dataset"))
        fetcher.__dict__["_dlwatch_samples"] = 0
    except Exception as e:  # a check's failure stops that check only
        st.worker["check_error"] = repr(e)
    st.write_json()


_EXEC_WATCHED = False


def _watch_exec():
    """In a DataLoader worker, wrap ``os.execv`` and ``os.execve`` (every ``os.exec*`` ends in one
    of them; Lib/os.py) so that a worker replacing itself with another program first records the
    program and the Python frames that called it (``exec`` in its JSON). Nothing else changes:
    the original runs, with the same arguments. Armed in every child forked from a recorded
    process (a forked worker's ``worker_init_fn`` runs before its first sample) and at a
    worker's first sample (spawn and forkserver workers); whether the caller is a DataLoader
    worker is asked when it execs (``_worker_info``, set by ``_worker_loop`` before
    ``worker_init_fn``: torch/utils/data/_utils/worker.py), and the wrappers are never stacked."""
    if getattr(os.execv, "__wrapped__", None) is not None:
        return  # armed already (inherited through fork)

    def wrap(original):
        def exec_(path, *args):
            if _worker_info() is None:
                return original(path, *args)
            try:
                frames: List[Dict[str, Any]] = []
                frame: Optional[FrameType] = sys._getframe(1)
                while frame is not None and len(frames) < MAX_FRAMES:
                    frames.append(
                        {"file": frame.f_code.co_filename, "line": frame.f_lineno, "function": _function(frame.f_code)}
                    )
                    frame = frame.f_back
                frames.reverse()
                st = _state()
                st.exec_ = {"path": os.fsdecode(path), "stack": frames, "ns": time.monotonic_ns()}
                st.write_json()
            except Exception:
                pass
            return original(path, *args)

        exec_.__wrapped__ = original  # type: ignore[attr-defined]
        return exec_

    os.execv = wrap(os.execv)
    os.execve = wrap(os.execve)


def _enable_faulthandler():
    """In a DataLoader worker, turn on ``faulthandler`` for the crashing thread (unless the job
    did, or ``DLWATCH_FAULTHANDLER=0``): a worker that dies of SIGSEGV, SIGBUS, SIGFPE or
    SIGABRT then writes its Python stack to stderr before PyTorch's own handler runs. Called at
    the worker's first sample, after ``_worker_loop`` installed PyTorch's handlers
    (``_set_worker_signal_handlers``, torch/utils/data/_utils/signal_handling.py): faulthandler
    dumps, restores the handler it found, and raises the signal again, so PyTorch's still runs
    (CPython's Modules/faulthandler.c)."""
    if os.environ.get(ENV_FAULTHANDLER, "1") == "0" or _worker_info() is None:
        return
    import faulthandler

    if not faulthandler.is_enabled():
        try:
            faulthandler.enable(all_threads=False)
        except (ValueError, OSError, AttributeError, RuntimeError):
            pass  # no usable stderr in this worker


def _on_sample(fetcher):
    """Each read of the fetcher's ``dataset`` or ``dataset_iter`` (once a sample): counted in
    ``<pid>.fetch``; with the data checks, after ``RNG_RECHECK_AFTER`` reads, the generators'
    states again, to tell which ones the worker drew from. The first read in a worker arms
    :func:`_watch_exec` and :func:`_enable_faulthandler`."""
    global _EXEC_WATCHED
    if not _EXEC_WATCHED:
        _EXEC_WATCHED = True
        _watch_exec()
        _enable_faulthandler()
    _state().fetched_one()
    if not _CHECKS:
        return
    d = fetcher.__dict__
    n = d.get("_dlwatch_samples")
    if n is None:
        return
    if n + 1 < RNG_RECHECK_AFTER:
        d["_dlwatch_samples"] = n + 1
        return
    del d["_dlwatch_samples"]
    st = _state()
    if st.worker is not None:
        try:
            st.worker["rng_later"] = _rng_states(d.get("dataset"))
        except Exception as e:
            st.worker["check_error"] = repr(e)
        st.write_json()


def _indices(value):
    """The sample indices of a batch as a list of ints (``None`` when they are not ints: an
    iterable Dataset's, or a sampler of keys)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return list(value[:MAX_FAILED_INDICES])
    return None


def _on_exception_wrapped(_wrapper, _where):
    """A DataLoader worker caught an exception from ``fetcher.fetch(index)`` and wraps it for
    main (``ExceptionWrapper.__init__`` sets ``where`` last, in ``_worker_loop``'s ``except``,
    torch/utils/data/_utils/worker.py): record which batch failed, its sample indices, and the
    index the map-style fetcher was reading when it raised (``idx`` of the comprehension in
    ``_MapDatasetFetcher.fetch``, torch/utils/data/_utils/fetch.py, or else the index argument
    of the first ``__getitem__`` below the fetcher), read from the exception's traceback, and
    ``through``: the method the fetcher called when that ``__getitem__`` was reached through it
    (``Subset.__getitems__``: the index is then of the dataset inside). Only ints and code names
    are taken from those frames, nothing else of their locals."""
    st = _state()
    if st.worker is None and _worker_info() is None:
        return  # main's pin-memory thread, or a worker_init_fn failure before any fetch
    if len(st.failed) >= MAX_FAILED:
        return
    worker_module = sys.modules.get("torch.utils.data._utils.worker")
    fetch_module = sys.modules.get("torch.utils.data._utils.fetch")
    loop_code = getattr(getattr(worker_module, "_worker_loop", None), "__code__", None)
    fetch_file = getattr(fetch_module, "__file__", None)
    exc_type, _, tb = sys.exc_info()
    batch = indices = sample = None
    through = None  # the method the fetcher called, when a __getitem__ deeper down raised
    after_fetch = called_by_fetch = False
    while tb is not None:
        frame = tb.tb_frame
        code = frame.f_code
        if code is loop_code:
            got = frame.f_locals.get("idx")
            batch = got if isinstance(got, int) else None
            indices = _indices(frame.f_locals.get("index"))
        elif fetch_file and code.co_filename == fetch_file:
            sample = sample or _indices(frame.f_locals.get("idx"))  # CPython 3.11's comprehension frame
            after_fetch = called_by_fetch = True
            tb = tb.tb_next
            continue
        elif after_fetch and code.co_name == "__getitem__" and code.co_argcount >= 2:
            sample = sample or _indices(frame.f_locals.get(code.co_varnames[1]))  # its index argument
            after_fetch = False
        elif called_by_fetch and through is None and code.co_name != "<listcomp>":
            through = _function(code)  # e.g. Subset.__getitems__: the index is of the dataset inside
        called_by_fetch = False
        tb = tb.tb_next
    del tb
    if batch is None:
        return  # not a fetch (worker_init_fn raised before the loop)
    info = _worker_info()
    st.failed.append(
        {
            "worker": getattr(info, "id", None),
            "batch": batch,
            "indices": indices,
            "sample": sample[0] if sample and len(sample) == 1 else None,
            "through": through,
            "exception": getattr(exc_type, "__name__", None),
            "ns": time.monotonic_ns(),
        }
    )
    st.write_json()


def _threads_now(skip_frame):
    """Every thread of this process: name, ids, daemon flag and Python stack (innermost last)."""
    by_ident = {t.ident: t for t in threading.enumerate()}
    out = []
    frame: Optional[FrameType]
    for ident, frame in list(sys._current_frames().items())[:MAX_THREADS]:
        if ident == threading.get_ident():
            frame = skip_frame
        stack: List[Dict[str, Any]] = []
        while frame is not None and len(stack) < MAX_FRAMES:
            stack.append(
                {"file": frame.f_code.co_filename, "line": frame.f_lineno, "function": _function(frame.f_code)}
            )
            frame = frame.f_back
        stack.reverse()
        t = by_ident.get(ident)
        out.append(
            {
                "name": t.name if t else None,
                "ident": ident,
                "native_id": getattr(t, "native_id", None) if t else None,
                "daemon": t.daemon if t else None,
                "forking": ident == threading.get_ident(),
                "stack": stack,
            }
        )
    return out


def _os_threads():
    """Every OS thread of this process as ``[tid, comm]`` (``/proc/self/task``): the native
    threads too (a Rust or OpenMP pool), which ``threading`` does not list."""
    out = []
    try:
        tids = sorted(int(t) for t in os.listdir("/proc/self/task"))[: 4 * MAX_THREADS]
    except (OSError, ValueError):
        return None
    for tid in tids:
        try:
            with open("/proc/self/task/%d/comm" % tid, "rb") as f:
                out.append([tid, f.read().decode("utf-8", "replace").strip()])
        except OSError:
            continue
    return out


def _before_fork():
    """``os.register_at_fork(before=…)``: when a DataLoader iterator forks its workers, record
    the forking process's threads once per iterator."""
    if _DISABLED is not None or _MP_INIT_CODE is None:
        return
    try:
        caller = sys._getframe(1)
        frame: Optional[FrameType] = caller
        for _ in range(12):
            if frame is None:
                return
            if frame.f_code is _MP_INIT_CODE:
                break
            frame = frame.f_back
        else:
            return
        it = frame.f_locals.get("self")
        entry = _record_of(it) if it is not None else None
        if entry is None or entry[1]["threads_at_fork"] is not None:
            return
        entry[1]["threads_at_fork"] = _threads_now(caller)
        entry[1]["os_threads_at_fork"] = _os_threads()
        entry[1]["forked_ns"] = time.monotonic_ns()
    except Exception as e:
        _disable("at fork: %r" % (e,))


def _after_fork_in_child():
    global _STATE, _EXEC_WATCHED
    _STATE = None  # the parent's file is the parent's; the child opens its own when it needs one
    _EXEC_WATCHED = False
    try:
        _watch_exec()  # before worker_init_fn, which a forked worker runs before any sample
    except Exception:
        pass


class _Anchor(object):
    """What multiprocessing's after-fork registry keeps a weak reference to (``_ANCHOR``)."""


_ANCHOR = _Anchor()


def _after_mp_start(_anchor):
    """In a process that ``multiprocessing`` started, once ``current_process()`` is that process
    (``BaseProcess._bootstrap`` runs the after-fork hooks then, CPython's
    Lib/multiprocessing/process.py): have its end recorded (:func:`_on_mp_end`), unless it is a
    DataLoader worker (its target ``_worker_loop``: PyTorch says how those end). A finalizer of
    ``multiprocessing.util``, never a wrapper: no frame of ours is on any stack of the job."""
    try:
        import multiprocessing
        from multiprocessing import util

        target = getattr(multiprocessing.current_process(), "_target", None)
        if getattr(target, "__name__", None) == "_worker_loop":
            return
        util.Finalize(None, _on_mp_end, exitpriority=100)
    except Exception:
        pass


def _on_mp_end():
    """Record how this multiprocessing process ends, in its ``<pid>.json`` (``ended``): its name,
    the exit code ``_bootstrap`` will return (0, a ``SystemExit`` code, or 1 for an uncaught
    exception) and that exception's ``Type: message`` (``MAX_ENDED_TEXT`` characters). It runs in
    ``util._exit_function``, which ``_bootstrap`` calls in the ``finally:`` around ``self.run()``,
    where ``sys.exc_info()`` is the exception leaving ``run()``. A process killed by a signal or
    ended by ``os._exit`` records nothing. Never raises (a finalizer that raises is printed)."""
    try:
        if _DISABLED is not None or _FOLDER is None:
            return
        import multiprocessing

        exc = sys.exc_info()[1]
        text = None
        if exc is None:
            code = 0
        elif isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        else:
            code = 1
            try:
                text = ("%s: %s" % (type(exc).__name__, exc))[:MAX_ENDED_TEXT]
            except Exception:
                text = type(exc).__name__[:MAX_ENDED_TEXT]
        st = _state()
        st.ended = {
            "name": str(multiprocessing.current_process().name)[:MAX_ENDED_TEXT],
            "code": code,
            "exception": text,
            "ns": time.monotonic_ns(),
        }
        st.write_json()
    except BaseException:
        pass


def _at_exit():
    st = _STATE
    if st is not None and st.pid == os.getpid() and _DISABLED is None:
        try:
            st.write_json()
        except Exception:
            pass


def install(module):
    """Make the attributes of ``module._BaseDataLoaderIter`` (and, with the data checks, of the
    fetcher) observable (see the module docstring) and register the fork and exit handlers.

    Raises:
        AttributeError: this torch's ``dataloader`` lacks a class the recorder needs.
    """
    global _TORCH_DIR, _MP_INIT_CODE
    import atexit

    base = module._BaseDataLoaderIter
    multi = module._MultiProcessingDataLoaderIter
    torch_module = sys.modules.get("torch")
    torch_file = getattr(torch_module, "__file__", None) or module.__file__
    _TORCH_DIR = os.path.dirname(os.path.abspath(torch_file)) + os.sep
    _MP_INIT_CODE = multi.__init__.__code__
    base._profile_name = _Attribute("_profile_name", on_get=_entered, on_set=_on_profile_name_set)
    base._num_yielded = _Attribute("_num_yielded", on_set=_on_num_yielded_set)
    fetch = module._utils.fetch
    fetch._BaseDatasetFetcher.dataset = _Attribute("dataset", on_get=_on_sample)
    fetch._IterableDatasetFetcher.dataset_iter = _Attribute("dataset_iter", on_get=_on_sample)
    if _CHECKS:
        fetch._BaseDatasetFetcher.drop_last = _Attribute("drop_last", on_set=_on_fetcher_ready)
    wrapper = getattr(sys.modules.get("torch._utils"), "ExceptionWrapper", None)
    if wrapper is not None:
        wrapper.where = _Attribute("where", on_set=_on_exception_wrapped)
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
    atexit.register(_at_exit)
    from multiprocessing import util as mp_util

    mp_util.register_after_fork(_ANCHOR, _after_mp_start)
    _apply_fix(module)


def _apply_fix(module):
    """Apply a ``dlwatch verify`` run's fix (``_dlwatch_fix``), when it asks for one. A fix
    that cannot be applied raises, so the recorder is disabled and says why: the run then shows
    no inside view, and ``dlwatch verify`` does not count it as the fix holding."""
    global _FIX
    if not os.environ.get("DLWATCH_APPLY"):
        return
    import _dlwatch_fix

    doc = _dlwatch_fix.plan()
    if doc is not None:
        _FIX = _dlwatch_fix.apply(module, _TORCH_DIR, doc)


def start(folder, module):
    """Install the recorder in this process, writing to ``folder``, now that ``module``
    (``torch.utils.data.dataloader``) is loaded: called by ``_dlwatch_arm`` once it decided this
    process belongs to the watched job. Never raises."""
    global _FOLDER
    _FOLDER = folder
    _install_safely(module)
    if _DISABLED is None:
        try:
            _state().write_json()  # "recording": the sidecar may tell an idle script from a deaf recorder
        except Exception as e:
            _disable("cannot write the record: %r" % (e,))


def _install_safely(module):
    try:
        install(module)
    except Exception as e:
        _disable("cannot install on this torch: %r" % (e,))
