"""``dlwatch cluster``: a job across nodes, as Prometheus has it from every node's sidecar.

Each node's ``dlwatch run --metrics-port`` serves its ranks' series (:mod:`watchdog.watch.metrics`);
Prometheus scrapes them all. This asks Prometheus's HTTP API for instant vectors
(``GET /api/v1/query``, https://prometheus.io/docs/prometheus/latest/querying/api/) and prints
one row per rank: node, local rank, state, cause, seconds since progress, batches, data wait
(seconds main waited in ``__next__``), the first report's kind and folder, then which rank
stalled first. A rank whose sidecar stopped answering (``up == 0``) is listed as such from its
last values (``last_over_time``), never dropped.

NOTE [ Which rank stalled first ]
When one rank stops, the others stop soon after, waiting for it in a collective: every rank's
last progress may fall within the same second (issue #37: four ranks on two nodes, and the
earliest timestamp was the torchrun agent's own row). So the first is decided by cause before
time (:func:`cause`):
1. a rank whose DataLoader stalled (a hang report of this run other than
   ``stall_outside_loader``, or main waiting in ``__next__`` for a worker's batch now,
   ``dlwatch_loader_waiting_for_batch``) or that crashed (a crash report of this run);
2. a rank whose cause is not known (no report, no inside view);
3. a rank stalled outside its DataLoader (``stall_outside_loader``, or main not in ``__next__``):
   most likely waiting for another rank.
Within the first of these classes that holds a stalled rank, the earliest
``dlwatch_last_progress_timestamp_seconds`` (each node's own clock at its last progress, not
the ages at scrape time, which differ by the scrapes' skew) comes first; ranks within
:data:`TIE_S` of it are a tie, and the verdict says so instead of naming one. A launcher's row
(:attr:`RankRow.agent`: a sidecar serves its job's own row while it knows no ranks, and
Prometheus keeps it an hour) is never a candidate: it never iterates a loader. c10d numbers
ranks by arrival at the rendezvous, not by ``--node-rank``, so the verdict and the table name
each rank's node.

What it trusts of Prometheus: nothing but the answer's shape. Credentials in the URL
(``user:password@``) are sent as basic auth to that origin only: a redirect to another origin
(scheme, host, port: RFC 6454) is refused. The whole command has one deadline (``--timeout``,
connection, every query and every byte of every answer together), each answer is at most
:data:`MAX_ANSWER_BYTES` and :data:`MAX_SERIES` series, is decoded against the API's types
(``msgspec``), and every label value printed is made one printable line
(:func:`watchdog.text.one_line`) and cut to :data:`MAX_CELL_CHARS`.

Exit codes: 0 nothing stalled, 1 a rank stalled, 2 a bad URL, or Prometheus cannot be reached,
refused the query, redirected elsewhere, answered too much, too late or not as its API, or has
no ``dlwatch_`` series (:class:`ClusterError`; one line).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import http.client
import json
import math
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

import msgspec
from tabulate import tabulate

from .. import redact
from ..argtypes import positive_float
from ..collect.discovery import RUN_ID_VALUE
from ..exits import Exit
from ..text import one_line

# How far back a rank whose sidecar went down is still shown with its last values.
LOOKBACK = "1h"
# The most seconds one network wait (connect, one read) may take, within the command's deadline.
QUERY_TIMEOUT_S = 10.0
# The whole command's deadline by default (seconds): every query and its answer together.
DEADLINE_S = 30.0
# The most bytes of one answer: 20,000 series of dlwatch's labels are about 4.5 MB.
MAX_ANSWER_BYTES = 8 << 20
# The most series of one answer (a rank is one series of each query): more is refused, one line.
MAX_SERIES = 20_000
# The most characters of one value shown in the table or the verdict (a label may be any length).
MAX_CELL_CHARS = 120
# Ranks whose last progress lies within this many seconds of each other, in the same cause class,
# are a tie: a sidecar dates a rank's last batch at the first tick that counted it, and while
# batches flow it takes one tick of three of its interval_s (1 s: NOTE [ Lean ticks ] in
# watchdog/collect/read_plan.py), so a smaller lead says nothing.
TIE_S = 3.0
# The most ranks the verdict names one by one (the table lists them all).
MAX_NAMED = 8
# Causes (NOTE [ Which rank stalled first ]), in the order the first to stall is sought.
CAUSE_LOADER = "loader stalled"
CAUSE_CRASHED = "crashed"
CAUSE_UNKNOWN = ""
CAUSE_OUTSIDE = "outside loader"
_CAUSE_ORDER = {CAUSE_LOADER: 0, CAUSE_CRASHED: 0, CAUSE_UNKNOWN: 1, CAUSE_OUTSIDE: 2}
# Hang kinds that say main stopped outside its DataLoader, or nothing of where (engine.py's table).
_NOT_LOADER_KINDS = frozenset({"stall_outside_loader", "unknown"})
_READ_CHUNK = 64 << 10

T = TypeVar("T")


class ClusterError(Exception):
    """Prometheus could not be asked, answered what its API does not, or knows no ``dlwatch_``
    series (exit code 2)."""


@dataclass(frozen=True)
class RankRow:
    """One rank of the job across nodes, as Prometheus last had it. Times are Unix seconds.

    ``report_*`` is the rank's first report of this run; ``last_mode``/``last_kind`` its latest
    hang or crash report of this run ("" none); ``waiting_for_batch`` whether main waits in
    ``__next__`` for a worker's batch now (``None``: not known, or its sidecar is down);
    ``agent`` whether the row is a launcher's, not a rank's (NOTE [ Which rank stalled first ])."""

    node: str
    rank: str
    local_rank: str
    run_id: str
    instance: str
    up: bool
    last_progress: Optional[float]
    since_progress_s: Optional[float]
    batches: Optional[float]
    data_wait_s: Optional[float]
    stall_timeout_s: Optional[float] = None
    report_kind: str = ""
    report_mode: str = ""
    report_folder: str = ""
    last_mode: str = ""
    last_kind: str = ""
    waiting_for_batch: Optional[bool] = None
    agent: bool = False


# The API's answer (https://prometheus.io/docs/prometheus/latest/querying/api/#format-overview),
# decoded by type: anything else is "not Prometheus's HTTP API", never a traceback.
class _Series(msgspec.Struct):
    metric: Dict[str, str]
    value: Tuple[float, str]


class _Data(msgspec.Struct):
    resultType: str
    result: msgspec.Raw


class _Answer(msgspec.Struct):
    status: str
    data: Optional[_Data] = None
    error: str = ""


def cell(text: str, limit: int = MAX_CELL_CHARS) -> str:
    """``text`` (a label value from Prometheus) as it may reach a terminal: one printable line
    (:func:`watchdog.text.one_line`: line breaks and control characters escaped), cut to
    ``limit`` characters with ``…``."""
    text = one_line(text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shown(url: str) -> str:
    """``url`` as it may be printed: without a password (``user:…@host``), one printable line."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password is None:
            return cell(url, 200)
        netloc = f"{parts.username}:…@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return cell(urllib.parse.urlunsplit(parts._replace(netloc=netloc)), 200)
    except ValueError:  # not a URL: what looks like a password in it is redacted by shape
        return cell(redact.value(url), 200)


def _origin(url: str) -> Tuple[str, str, Optional[int]]:
    """The origin of ``url`` (RFC 6454: scheme, host, port; the default port filled in).

    Raises:
        ValueError: not a URL (a port out of range, an unclosed ``[``).
    """
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only within the origin first asked: urllib copies every header
    (``Authorization`` included) to the URL a redirect names, so another origin is refused."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        try:
            same = _origin(newurl) == _origin(req.full_url)
        except ValueError:
            same = False
        if not same:
            fp.close()
            raise ClusterError(
                f"--prometheus {self.shown}: redirected to another origin ({_shown(newurl)}); refused: "
                "credentials and queries go to the URL given only"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _remaining(deadline: Optional[float], shown: str, timeout_s: float) -> float:
    """Seconds left before ``deadline`` (``time.monotonic``), at most ``timeout_s``.

    Raises:
        ClusterError: the deadline has passed.
    """
    if deadline is None:
        return timeout_s
    left = deadline - time.monotonic()
    if left <= 0:
        raise ClusterError(f"--prometheus {shown}: no whole answer within the deadline (--timeout)")
    return min(left, timeout_s)


def query(base_url: str, expr: str, timeout_s: float = QUERY_TIMEOUT_S, deadline: Optional[float] = None) -> List[dict]:
    """The result of instant query ``expr`` (a vector: ``[{"metric": {...}, "value": [t, "v"]}]``,
    each ``metric`` a dict of strings). ``base_url`` is http(s), optionally with
    ``user:password@`` (sent as basic auth to that origin only, never shown). ``timeout_s``
    bounds each network wait; ``deadline`` (``time.monotonic()`` seconds), when given, the whole
    query: checked before it and after each piece of the answer read.

    Raises:
        ClusterError: not an http(s) URL, Prometheus cannot be reached, refused the query,
            redirected to another origin, answered more than :data:`MAX_ANSWER_BYTES` or
            :data:`MAX_SERIES` series, past ``deadline``, or something that is not its API's
            instant vector.
    """
    shown = _shown(base_url)
    try:
        parts = urllib.parse.urlsplit(base_url)
        port = parts.port
    except ValueError as e:
        raise ClusterError(f"--prometheus {shown}: not a URL ({cell(str(e))})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClusterError(f"--prometheus {shown}: not an http:// or https:// URL (e.g. http://prometheus:9090)")
    netloc = (f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname) + (f":{port}" if port else "")
    url = urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/") + "/api/v1/query?"
    request = urllib.request.Request(url + urllib.parse.urlencode({"query": expr}))
    if parts.username is not None:
        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    opener = urllib.request.build_opener(_SameOriginRedirects(shown))
    try:
        with opener.open(request, timeout=_remaining(deadline, shown, timeout_s)) as response:
            body = _read_answer(response, deadline, shown)
    except urllib.error.HTTPError as e:
        try:
            why = cell(msgspec.json.decode(e.read(1 << 16), type=_Answer).error) or cell(str(e.reason))
        except (msgspec.DecodeError, OSError, http.client.HTTPException, RecursionError):
            why = f"HTTP {e.code} {cell(str(e.reason))} (is this Prometheus?)"
        raise ClusterError(f"--prometheus {shown}: the query {expr!r} was refused: {why}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise ClusterError(f"--prometheus {shown}: cannot be reached: {cell(str(reason))}") from None
    return _vector(body, expr, shown)


def _read_answer(response, deadline: Optional[float], shown: str) -> bytes:
    """The body of ``response``, read a piece at a time until its end, ``deadline`` checked
    after each piece (a server sending one byte at a time is cut off there).

    Raises:
        ClusterError: more than :data:`MAX_ANSWER_BYTES`, or past ``deadline``.
    """
    pieces: List[bytes] = []
    size = 0
    while True:
        piece = response.read1(_READ_CHUNK)
        if not piece:
            return b"".join(pieces)
        size += len(piece)
        if size > MAX_ANSWER_BYTES:
            raise ClusterError(
                f"--prometheus {shown}: answered more than {MAX_ANSWER_BYTES >> 20} MiB; name one run with --run-id"
            )
        pieces.append(piece)
        _remaining(deadline, shown, QUERY_TIMEOUT_S)


def _vector(body: bytes, expr: str, shown: str) -> List[dict]:
    """The series of an instant-vector answer ``body``.

    Raises:
        ClusterError: not the API's answer (the first mismatch named), not a vector, or more
            than :data:`MAX_SERIES` series.
    """
    try:
        answer = msgspec.json.decode(body, type=_Answer)
        data = answer.data
        if answer.status != "success" or data is None:
            raise ClusterError(f"--prometheus {shown}: answered, but not as Prometheus's HTTP API (/api/v1/query)")
        if data.resultType != "vector":
            raise ClusterError(f"--prometheus {shown}: {expr!r} gave no instant vector")
        series = msgspec.json.decode(data.result, type=List[_Series])
    except (msgspec.DecodeError, RecursionError) as e:
        why = cell(str(e)) if isinstance(e, msgspec.ValidationError) else "not JSON"
        raise ClusterError(
            f"--prometheus {shown}: answered, but not as Prometheus's HTTP API (/api/v1/query): {why}"
        ) from None
    if len(series) > MAX_SERIES:
        raise ClusterError(
            f"--prometheus {shown}: {expr!r} gave {len(series)} series, more than {MAX_SERIES}; "
            "name one run with --run-id"
        )
    return [{"metric": s.metric, "value": list(s.value)} for s in series]


def _value(result: dict) -> Optional[float]:
    """The sample's value, or ``None`` when it is missing or not a finite number."""
    try:
        v = float(result["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _key(metric: dict) -> Tuple[str, str, str]:
    return (str(metric.get("node", "")), str(metric.get("run_id", "")), str(metric.get("rank", "")))


def collect(
    base_url: str, run_id: Optional[str] = None, now: Optional[float] = None, deadline_s: Optional[float] = None
) -> List[RankRow]:
    """Every rank Prometheus has (of ``run_id`` when given), with its last values, ordered by
    node then rank. ``deadline_s``: seconds for every query together (``None``: each network
    wait bounded only, :data:`QUERY_TIMEOUT_S`).

    Raises:
        ClusterError: as :func:`query`; also when no ``dlwatch_`` series is found.
    """
    if run_id is not None and not RUN_ID_VALUE.match(run_id):  # taken into a query: no quote, no backslash
        raise ClusterError(f"--run-id {cell(repr(run_id))}: not a run id (letters, digits, _ . : @ / + = -)")
    deadline = None if deadline_s is None else time.monotonic() + deadline_s

    def ask(expr: str) -> List[dict]:
        return query(base_url, expr, deadline=deadline)

    sel = f'{{run_id="{run_id}"}}' if run_id else ""
    last = ask(f"last_over_time(dlwatch_last_progress_timestamp_seconds{sel}[{LOOKBACK}])")
    since_expr = f"last_over_time(dlwatch_seconds_since_progress{sel}[{LOOKBACK}])"
    since = ask(since_expr)
    if not last and not since:
        raise ClusterError(
            f"--prometheus {_shown(base_url)}: no dlwatch_ series" + (f" of run {run_id}" if run_id else "")
        )
    # every epoch's batches: an iterator's own count (dlwatch_loader_batches) reads 0 at each
    # epoch's start, and a rank that moves would show none
    batches = ask(
        f"sum by (node, run_id, rank) (last_over_time(dlwatch_loader_batches_delivered_total{sel}[{LOOKBACK}]))"
    )
    wait = ask(f"sum by (node, run_id, rank) (last_over_time(dlwatch_loader_data_wait_seconds{sel}[{LOOKBACK}]))")
    reports = ask(f"last_over_time(dlwatch_report_info{sel}[{LOOKBACK}])")
    timeouts = ask(f"last_over_time(dlwatch_stall_timeout_seconds{sel}[{LOOKBACK}])")
    starts = ask(f"last_over_time(dlwatch_job_start_timestamp_seconds{sel}[{LOOKBACK}])")
    # now, not over the hour: a loader whose series ended (another loader took over) says nothing
    waiting = ask(f"max by (node, run_id, rank) (dlwatch_loader_waiting_for_batch{sel})")
    # the targets of dlwatch's sidecars only (a Prometheus may scrape many others)
    up = {str(r["metric"].get("instance", "")): _value(r) for r in ask(f"up and on (instance) {since_expr}")}
    now = time.time() if now is None else now
    rows: Dict[Tuple[str, str, str], dict] = {}
    for result in last + since:
        m = result["metric"]
        rows.setdefault(_key(m), {"local_rank": str(m.get("local_rank", "")), "instance": str(m.get("instance", ""))})
    for result in last:
        rows[_key(result["metric"])]["last"] = _value(result)
    for result in since:
        rows[_key(result["metric"])]["since"] = _value(result)
    by = {
        name: {_key(r["metric"]): _value(r) for r in results}
        for name, results in (("b", batches), ("w", wait), ("t", timeouts), ("s", starts), ("q", waiting))
    }
    firsts: Dict[Tuple[str, str, str], Tuple[str, str, str]] = {}
    lasts: Dict[Tuple[str, str, str], Tuple[str, str]] = {}
    for r in sorted(reports, key=lambda r: _folder_name(str(r["metric"].get("folder", "")))):
        m = r["metric"]
        key, folder = _key(m), str(m.get("folder", ""))
        if not _of_this_run(folder, by["s"].get(key)):
            continue  # an earlier run's report on this node: the series' labels are the same
        kind, mode = str(m.get("kind", "")), str(m.get("mode", ""))
        firsts.setdefault(key, (kind, mode, folder))
        if mode in ("hang", "crash"):
            lasts[key] = (mode, kind)
    # a sidecar serves its job's own row only while it knows no ranks: a rank-less row without
    # loader series, of a sidecar that serves ranks, is the launcher's (torchrun's agent)
    ranked = {row["instance"] for (_node, _run, rank), row in rows.items() if rank}
    out = []
    for key, row in rows.items():
        node, run, rank = key
        alive = up.get(row["instance"]) == 1.0
        last_at = row.get("last")
        if alive and last_at is not None:
            since_s: Optional[float] = now - last_at  # by the node's clock: a skew counts
        else:
            # A sidecar that no longer answers (its job ended, or its node is gone): its age as
            # last scraped, never one that grows after it: a job that finished is not stalled.
            since_s = row.get("since")
        kind, mode, folder = firsts.get(key, ("", "", ""))
        last_mode, last_kind = lasts.get(key, ("", ""))
        waits = by["q"].get(key) if alive else None
        agent = not rank and row["instance"] in ranked and by["b"].get(key) is None and by["w"].get(key) is None
        out.append(
            RankRow(
                node, rank, row["local_rank"], run, row["instance"], alive, last_at, since_s,
                by["b"].get(key), by["w"].get(key), by["t"].get(key), kind, mode, folder,
                last_mode, last_kind, None if waits is None else waits > 0, agent,
            )
        )  # fmt: skip
    return sorted(out, key=lambda r: (r.node, _rank_number(r.rank), r.rank))


def _rank_number(rank: str) -> int:
    """``rank`` as a number to sort by (-1: not a number of ASCII digits, such as ``"²"``)."""
    return int(rank) if rank.isascii() and rank.isdigit() and len(rank) <= 18 else -1


def within(deadline_s: float, shown: str, work: Callable[[], T]) -> T:
    """``work()``'s result, or :class:`ClusterError` once ``deadline_s`` seconds have passed
    without one: what no socket timeout bounds (a name lookup, a server that sends a header
    one byte at a time, a TLS handshake) is left in a daemon thread that ends with the process.

    Raises:
        ClusterError: ``work`` raised it, or did not return within ``deadline_s``.
    """
    box: Dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = work()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread as it is
            box["error"] = e

    thread = threading.Thread(target=run, name="dlwatch-cluster-query", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        raise ClusterError(f"--prometheus {shown}: no whole answer within {deadline_s:g} s (--timeout)")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


def _folder_name(folder: str) -> str:
    """The last part of a report folder's path (``<UTC time>-…``: sorts by time)."""
    return folder.rstrip("/").rsplit("/", 1)[-1]


def _of_this_run(folder: str, started: Optional[float]) -> bool:
    """Whether a report folder (``<UTC time>-…``) was written after the run that ``started``
    (Unix seconds; ``None``: not known, kept)."""
    name = _folder_name(folder)
    try:
        written = dt.datetime.strptime(name[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        return True
    return started is None or written >= started - 1.0


def stalled_after(row: RankRow, override_s: Optional[float]) -> float:
    """The age at which ``row`` counts as stalled: ``override_s`` when given, else its sidecar's
    own ``stall_timeout_s``, else 60 s."""
    return override_s if override_s is not None else row.stall_timeout_s or 60.0


def _clock(t: float) -> Optional[str]:
    """Unix seconds ``t`` as ``HH:MM:SSZ``, or ``None`` when no date has it."""
    try:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


def cause(row: RankRow) -> Tuple[str, str]:
    """Why ``row`` stalled, as far as its sidecar said: ``(class, words)``, the class one of
    :data:`CAUSE_LOADER`, :data:`CAUSE_CRASHED`, :data:`CAUSE_OUTSIDE` or :data:`CAUSE_UNKNOWN`
    (NOTE [ Which rank stalled first ]), the words for the verdict (label values printable)."""
    if row.last_mode == "crash":
        return CAUSE_CRASHED, f"it crashed ({cell(row.last_kind or '?')})"
    if row.last_mode == "hang" and row.last_kind not in _NOT_LOADER_KINDS:
        return CAUSE_LOADER, f"its DataLoader hang was reported ({cell(row.last_kind)})"
    if row.waiting_for_batch:
        return CAUSE_LOADER, "main waits in its DataLoader's __next__ for a worker's batch"
    if row.last_kind == "stall_outside_loader" or row.waiting_for_batch is False:
        return CAUSE_OUTSIDE, "main waits outside its DataLoader"
    return CAUSE_UNKNOWN, "its cause is not known (no report yet, no inside view)"


def _who(row: RankRow) -> str:
    """``rank R on NODE`` (``the job on NODE`` for a row without a rank), printable."""
    where = cell(row.node or row.instance)
    return f"rank {cell(row.rank)} on {where}" if row.rank else f"the job on {where}"


def _ranks_on_nodes(rows: List[RankRow]) -> str:
    """``ranks 0, 1 on node-a, rank 2 on node-b``: the ranks of ``rows`` by node, in their
    order, at most :data:`MAX_NAMED` named (then how many more), printable."""
    groups: Dict[str, List[str]] = {}
    jobs: List[str] = []  # rows without a rank: a single-process job's
    for r in rows[:MAX_NAMED]:
        if r.rank:
            groups.setdefault(cell(r.node or r.instance), []).append(cell(r.rank))
        else:
            jobs.append(_who(r))
    parts = [f"rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)} on {node}" for node, ranks in groups.items()]
    parts += jobs
    more = len(rows) - MAX_NAMED
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def _order(row: RankRow) -> Tuple[int, int, float]:
    """Sort key for the first to stall: cause class, then the earliest last progress, then (no
    timestamp) the largest age."""
    if row.last_progress is not None:
        return _CAUSE_ORDER[cause(row)[0]], 0, row.last_progress
    return _CAUSE_ORDER[cause(row)[0]], 1, -(row.since_progress_s or 0.0)


def _lead(first: RankRow, stalled: List[RankRow]) -> str:
    """How ``first``'s last progress compares with the other stalled ranks' ("" when none has
    one): ``N s before any other rank``, ``the others within TIE_S s``, or ``N s after rank R on
    NODE`` (first by cause, yet not by time)."""
    others = [r for r in stalled if r is not first and r.last_progress is not None]
    if first.last_progress is None or not others:
        return ""
    earliest = min(others, key=lambda r: r.last_progress or 0.0)
    lead = (earliest.last_progress or 0.0) - first.last_progress
    if lead >= TIE_S:
        return f"{lead:.0f} s before any other rank"
    if lead > -TIE_S:
        return f"the others within {TIE_S:g} s"
    return f"{-lead:.0f} s after {_who(earliest)}"


@dataclass(frozen=True)
class Verdict:
    """What ``dlwatch cluster`` concludes: the ranks ``stalled`` (never a launcher's row), the
    ``first`` of them (``None`` when nothing stalled or on a tie), the ranks ``tied`` for first
    (empty unless two or more are), and the ``line`` that says it (``None``: nothing stalled)."""

    stalled: List[RankRow]
    first: Optional[RankRow]
    tied: List[RankRow]
    line: Optional[str]


def judge(rows: List[RankRow], override_s: Optional[float] = None) -> Verdict:
    """The ranks stalled (:func:`stalled_after`, by their last progress; a launcher's row never)
    and which stalled first, by cause, then by time (NOTE [ Which rank stalled first ]). Label
    values in the line are printable (:func:`cell`)."""
    candidates = [r for r in rows if not r.agent]
    stalled = [
        r for r in candidates if r.since_progress_s is not None and r.since_progress_s >= stalled_after(r, override_s)
    ]
    if not stalled:
        return Verdict([], None, [], None)
    ordered = sorted(stalled, key=_order)
    first = ordered[0]
    first_class = cause(first)[0]
    same = [r for r in ordered if _CAUSE_ORDER[cause(r)[0]] == _CAUSE_ORDER[first_class]]
    tied = [
        r
        for r in same
        if first.last_progress is not None
        and r.last_progress is not None
        and r.last_progress - first.last_progress < TIE_S
    ]
    moving = len(candidates) - len(stalled)
    still = f"{moving} other rank(s) still moving" if moving else ""
    if len(tied) > 1:
        at = _clock(first.last_progress or 0.0)
        each = {
            CAUSE_LOADER: "each with its DataLoader stalled",
            CAUSE_CRASHED: "each crashed",
            CAUSE_OUTSIDE: "each waiting outside its DataLoader",
        }.get(first_class, "each for a cause not known")
        line = (
            f"a tie: {_ranks_on_nodes(tied)} stopped within {TIE_S:g} s of each other"
            + (f" ({at})" if at else "")
            + f", {each}: neither cause nor time tells which stalled first"
        )
        others = [r for r in ordered if r not in tied]
        if others:
            line += f"; then {_ranks_on_nodes(others)}"
        return Verdict(stalled, None, tied, line + (f"; {still}" if still else ""))
    by_cause = len(same) == 1 and len(ordered) > 1
    line = f"{_who(first)} stalled first" + (" by cause" if by_cause else "")
    detail = ""
    if first.last_progress is not None:
        detail = ", ".join(x for x in (_clock(first.last_progress), _lead(first, stalled)) if x)
    if still:
        detail += ("; " if detail else "") + still
    if detail:
        line += f" ({detail})"
    first_cause = cause(first)
    if first_cause[0] != CAUSE_UNKNOWN or by_cause:
        line += f": {first_cause[1]}"
    if by_cause:
        rest = [r for r in ordered if r is not first]
        # the others are of a later class only (``same`` holds ``first`` alone)
        for cls, words in (
            (CAUSE_UNKNOWN, "stalled, cause not known"),
            (CAUSE_OUTSIDE, "wait outside their DataLoader"),
        ):
            group = [r for r in rest if cause(r)[0] == cls]
            if group:
                line += f"; {_ranks_on_nodes(group)} {words}"
    if first.report_folder:
        line += f"; its report: {cell(first.node)}:{cell(first.report_folder, 2 * MAX_CELL_CHARS)}"
    elif not first.up:
        line += "; its sidecar no longer answers"
    return Verdict(stalled, first, [], line)


def first_stalled(rows: List[RankRow], override_s: Optional[float] = None) -> Tuple[List[RankRow], Optional[str]]:
    """:func:`judge`'s stalled ranks and its line."""
    verdict = judge(rows, override_s)
    return verdict.stalled, verdict.line


def render(rows: List[RankRow], stalled: List[RankRow], line: Optional[str]) -> str:
    """The table and the last line of ``dlwatch cluster``; every label value in it is one
    printable line (:func:`cell`)."""

    def fmt(v: Optional[float], spec: str) -> str:
        return "-" if v is None else format(v, spec)

    stalled_ids = {id(r) for r in stalled}
    table = []
    for r in rows:
        state = "agent" if r.agent else "sidecar down" if not r.up else "stalled" if id(r) in stalled_ids else "moving"
        table.append(
            [
                cell(r.node),
                cell(r.rank) or "-",
                cell(r.local_rank) or "-",
                state,
                ("-" if r.agent else cause(r)[0]) or "-",
                fmt(r.since_progress_s, ".0f"),
                fmt(r.batches, ".0f"),
                fmt(r.data_wait_s, ".1f"),
                cell(f"{r.report_mode} {r.report_kind}".strip()) or "-",
                cell(r.report_folder, 2 * MAX_CELL_CHARS) or "-",
            ]
        )
    headers = [
        "NODE", "RANK", "LOCAL", "STATE", "CAUSE", "SINCE PROGRESS S", "BATCHES", "DATA WAIT S", "REPORT", "FOLDER",
    ]  # fmt: skip
    # numbers are ours, formatted above; a label that reads as one ("0001", "1e5") is shown as it is
    align = ("left", "right", "right", "left", "left", "right", "right", "right", "left", "left")
    text = tabulate(table, headers=headers, tablefmt="simple", disable_numparse=True, colalign=align)
    ranks = sum(1 for r in rows if not r.agent)
    return text + "\n" + (line or f"nothing stalled ({ranks} rank(s))")


def add_parser(sub) -> None:
    """The ``cluster`` subcommand."""
    p = sub.add_parser(
        "cluster",
        help="the job across nodes, from Prometheus: which rank on which node stalled first, by cause",
        description="Ask Prometheus (which scrapes every node's `dlwatch run --metrics-port`) for the job's ranks "
        "and say which one stalled first: a rank whose DataLoader stalled or that crashed before ranks waiting "
        "outside their loader, then the earliest last progress; ranks no cause or second tells apart are a tie, "
        "and a launcher's own row is never named. Exit 0: nothing stalled; 1: a rank stalled; 2: a bad URL, or "
        "Prometheus cannot be reached, refused, redirected to another origin, answered too much, too late or not as "
        "its API, or has no dlwatch_ series.",
    )
    p.add_argument(
        "--prometheus",
        required=True,
        metavar="URL",
        help="Prometheus's base URL, e.g. http://prom:9090 (user:password@ is sent as basic auth to that origin only)",
    )
    p.add_argument("--run-id", metavar="ID", help="only this torchrun run (TORCHELASTIC_RUN_ID, the run_id label)")
    p.add_argument(
        "--stalled-after",
        type=positive_float,
        default=None,
        metavar="S",
        help="a rank counts as stalled once it has not moved for this long (default: its sidecar's stall_timeout_s)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=DEADLINE_S,
        metavar="S",
        help=f"seconds for the whole command: every query and answer together (default {DEADLINE_S:g})",
    )
    p.add_argument("--json", action="store_true", help="print the ranks and the verdict as JSON")


def cmd_cluster(args: argparse.Namespace) -> int:
    """``dlwatch cluster``; see the module docstring for its exit codes."""
    deadline_s = getattr(args, "timeout", DEADLINE_S)
    try:
        rows = within(
            deadline_s, _shown(args.prometheus), lambda: collect(args.prometheus, args.run_id, deadline_s=deadline_s)
        )
    except ClusterError as e:
        print(f"dlwatch: error: {e}", file=sys.stderr)
        return Exit.USAGE
    verdict = judge(rows, args.stalled_after)
    if args.json:

        def doc_of(r: RankRow) -> dict:
            return {**asdict(r), "cause": "" if r.agent else cause(r)[0]}

        def named(r: RankRow) -> dict:
            return {"node": r.node, "rank": r.rank}

        doc = {
            "ranks": [doc_of(r) for r in rows],
            "stalled": [doc_of(r) for r in verdict.stalled],
            "first": None if verdict.first is None else named(verdict.first),
            "tied": [named(r) for r in verdict.tied],
            "verdict": verdict.line,
        }
        print(json.dumps(doc, indent=1))  # ASCII: every control character and non-ASCII one escaped
    else:
        print(render(rows, verdict.stalled, verdict.line))
    return 1 if verdict.stalled else Exit.OK
