"""The recorder's records decoded: a ``<pid>.json`` parsed against its type (msgspec, bounded;
NOTE [ What the job writes ] in watchdog/collect/inside.py) and turned into the view's records
(:class:`LoaderView`, :class:`ForkRecord`, :class:`RngCheck`, :class:`WorkerExec`,
:class:`ProcessEnd`, :class:`WorkerFailure`). Read by :class:`watchdog.collect.inside.InsideReader`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Dict, Iterable, List, Mapping, Optional, Tuple, TypedDict, Union

import msgspec

from ..types import (
    ForkRecord,
    Frame,
    LoaderView,
    ProcessEnd,
    RngCheck,
    ThreadAtFork,
    WorkerExec,
    WorkerFailure,
)
from .hook_folder import FORMAT

# Bytes of one record read at most: a record of a busy job (16 iterators that each forked
# workers while 21 threads ran 40 frames deep, dlwatch run of 2026-12-05) weighed 0.8 MiB; the
# recorder's own bounds (MAX_ITERATORS, MAX_THREADS, MAX_FRAMES) allow about 3 MiB, which no
# job near them was seen to reach.
RECORD_MAX_BYTES = 2 << 20

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
    NOTE [ What the job writes ] in watchdog/collect/inside.py). msgspec's typed decoder
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


def pid_of(stem: str) -> Optional[int]:
    """The pid a recorder's file name stem (``123`` of ``123.bin``) names, or ``None`` unless it
    is written as the recorder writes it (ASCII digits, no leading zero): every pid has one
    name per kind of file."""
    if stem.isdigit() and stem.isascii() and (stem[0] != "0" or stem == "0"):
        return int(stem)
    return None


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
