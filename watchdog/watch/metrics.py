"""Prometheus metrics (``--metrics-port``): what the watchdog sees, served by ``prometheus_client``.

Values are read at scrape time from what the watch loop last recorded (each watcher's latest
sample and stall), never by touching the job's processes. Every series carries ``node`` (the
``node`` setting: the host name by default), and those of a rank its torchrun identity:
``run_id`` (``TORCHELASTIC_RUN_ID``), ``rank``, ``local_rank``, ``group_rank`` ("" where not
set); processes add ``role`` and ``worker_id``. Never a pid: workers get new pids every epoch,
and pid labels would grow the series count without bound. Names follow the Prometheus
conventions (base units, ``_bytes``, ``_seconds``, ``_total``;
https://prometheus.io/docs/practices/naming/).
"""

from __future__ import annotations

import dataclasses
import gzip
import http
import os
import selectors
import socket
import threading
import time
from collections import Counter
from typing import Callable, Dict, Iterable, List, Optional, Tuple
from urllib.parse import parse_qs

import h11
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector, CollectorRegistry

from .. import redact
from ..types import ROLE_MAIN, ROLE_WORKER, Frame, LoaderView, ReportWritten, Sample, WatcherStatus

PREFIX = "dlwatch"
MAX_REPORT_INFO = 256  # reports kept for dlwatch_report_info (the latest)


# The labels of a rank's series, after ``node``: (label, the rank variable it comes from).
RANK_LABELS = (
    ("run_id", "TORCHELASTIC_RUN_ID"),
    ("rank", "RANK"),
    ("local_rank", "LOCAL_RANK"),
    ("group_rank", "GROUP_RANK"),
)


def _loader_label(site: Optional[Frame]) -> str:
    """The ``loader`` label of a DataLoader made at ``site``: ``file:line`` (the file's base
    name), redacted like every byte dlwatch serves (the job names its files); ``?`` unknown."""
    return redact.value(f"{site.file.rsplit('/', 1)[-1]}:{site.line}") if site else "?"


def _waiting_s(view: LoaderView, now: float) -> float:
    """Seconds main has been inside ``__next__`` of ``view`` for the batch it waits for, at
    ``now`` (``time.monotonic()`` seconds, the clock the inside view records in); 0 when it is
    not waiting for a batch a worker owns (``waiting_worker`` -1: the epoch ended, which leaves
    ``waiting_since`` set until the next event, or the worker is unknown). The recorder adds a
    wait to ``wait_s`` only when its batch arrives (``_dlwatch_inside.py``, ``delivered``)."""
    if view.waiting_since is None or view.waiting_worker < 0:
        return 0.0
    return max(0.0, now - view.waiting_since)


def _absolute(folder: str) -> str:
    """``folder`` as an absolute path (``os.path.abspath``: joined to dlwatch's working
    directory, which dlwatch never changes); as given when that directory is gone."""
    try:
        return os.path.abspath(folder)
    except OSError:
        return folder


class JobMetrics(Collector):
    """A collector over the job's watchers.

    Args:
        watchers: returns, at scrape time, what each rank's watcher last saw
            (:class:`~watchdog.types.WatcherStatus`: its rank variables, latest sample and
            seconds since progress); one entry, with no rank, for a single-process job.
        node: the ``node`` label of every series (the ``node`` setting, else the host name).
        stall_timeout_s: the sidecar's ``stall_timeout_s``, served so that ``dlwatch cluster``
            judges a rank stalled as its own sidecar does (0: not served).
    """

    def __init__(
        self, watchers: Callable[[], List[WatcherStatus]], node: str = "", stall_timeout_s: float = 0.0
    ) -> None:
        self.watchers = watchers
        self.node = redact.value(node or socket.gethostname())
        self.stall_timeout_s = stall_timeout_s
        self._reports: Counter = Counter()
        self._written: List[Tuple[Tuple[str, ...], ReportWritten]] = []
        self._lock = threading.Lock()

    def note_report(self, written: ReportWritten) -> None:
        """Count one report (``written.mode``: hang, crash, live, exit) of ``written.kind``, and
        keep it for ``dlwatch_report_info`` (its folder made absolute, as dlwatch's working
        directory resolves it now, and redacted, as every byte dlwatch serves: an alert or
        ``dlwatch cluster`` names it away from where dlwatch started)."""
        with self._lock:
            self._reports[(written.mode, written.kind, written.rank)] += 1
            written = dataclasses.replace(written, folder=_absolute(written.folder))
            self._written.append((self._rank_labels(dict(written.rank_vars) or {"RANK": written.rank}), written))
            del self._written[:-MAX_REPORT_INFO]

    def _rank_labels(self, rank_vars: Dict[str, str]) -> Tuple[str, ...]:
        """``node`` then the :data:`RANK_LABELS` values of a rank ("" for those not set)."""
        return (self.node,) + tuple(str(rank_vars.get(var, "")) for _, var in RANK_LABELS)

    @staticmethod
    def _worker_ids(sample: Sample) -> Dict[int, str]:
        """pid -> worker id: from the inside view's record of the workers when there is one,
        else the workers' order of start."""
        ids: Dict[int, str] = {}
        for v in sample.loaders:
            for i, pid in enumerate(v.workers):
                ids[pid] = str(i)
        workers = sorted((p for p in sample.processes if p.role == ROLE_WORKER), key=lambda p: (p.create_time, p.pid))
        for i, p in enumerate(workers):
            ids.setdefault(p.pid, str(i))
        return ids

    def collect(self) -> Iterable:
        rank_labels = ["node"] + [label for label, _ in RANK_LABELS]
        labels = rank_labels + ["role", "worker_id"]
        cpu = CounterMetricFamily(
            f"{PREFIX}_process_cpu_seconds", "CPU time of a process of the job (user + system)", labels=labels
        )
        rss = GaugeMetricFamily(f"{PREFIX}_process_resident_memory_bytes", "RSS of a process of the job", labels=labels)
        pss = GaugeMetricFamily(
            f"{PREFIX}_process_proportional_memory_bytes",
            "PSS of a process of the job (read as USS is): each page shared with other processes "
            "counted in equal parts, so that a sum over main and its forked workers counts each page once",
            labels=labels,
        )
        uss = GaugeMetricFamily(
            f"{PREFIX}_process_unique_memory_bytes",
            "USS of a process of the job (read every memory_read_base_interval_s, less often while it stands still)",
            labels=labels,
        )
        fds = GaugeMetricFamily(
            f"{PREFIX}_process_open_fds", "open file descriptors of a process of the job", labels=labels
        )
        max_fds = GaugeMetricFamily(
            f"{PREFIX}_process_max_fds", "RLIMIT_NOFILE soft limit of a process of the job", labels=labels
        )
        threads = GaugeMetricFamily(f"{PREFIX}_process_threads", "threads of a process of the job", labels=labels)
        pinned = GaugeMetricFamily(
            f"{PREFIX}_process_pinned_memory_bytes",
            "CUDA pinned host memory of a process (/dev/nvidiactl mappings)",
            labels=labels,
        )
        since = GaugeMetricFamily(
            f"{PREFIX}_seconds_since_progress",
            "seconds since the DataLoader path of a rank last moved",
            labels=rank_labels,
        )
        progress_at = GaugeMetricFamily(
            f"{PREFIX}_last_progress_timestamp_seconds",
            "wall-clock time (Unix seconds) the DataLoader path of a rank last moved, as its node's clock read it: "
            "comparable across nodes, unlike the age at scrape time",
            labels=rank_labels,
        )
        stall_timeout = GaugeMetricFamily(
            f"{PREFIX}_stall_timeout_seconds",
            "the sidecar's stall_timeout_s: how long a rank's loader may stand still before it is examined",
            labels=rank_labels,
        )
        started = GaugeMetricFamily(
            f"{PREFIX}_job_start_timestamp_seconds",
            "when the rank's main process started (Unix seconds): tells one run on a node from the next",
            labels=rank_labels,
        )
        waiting = GaugeMetricFamily(
            f"{PREFIX}_loader_waiting_for_batch",
            "1 while main waits in __next__ of the latest iterator for a batch a worker owns, 0 while it is not in "
            "__next__ (inside view); not served while it is in __next__ for no worker's batch (the epoch ended, or "
            "num_workers=0)",
            labels=rank_labels + ["loader"],
        )
        shm_used = GaugeMetricFamily(
            f"{PREFIX}_shm_used_bytes", "bytes used in /dev/shm as the job sees it", labels=["node"]
        )
        shm_size = GaugeMetricFamily(f"{PREFIX}_shm_size_bytes", "size of /dev/shm as the job sees it", labels=["node"])
        batches = GaugeMetricFamily(
            f"{PREFIX}_loader_batches",
            "batches the latest iterator of a DataLoader has delivered (inside view)",
            labels=rank_labels + ["loader"],
        )
        delivered = CounterMetricFamily(
            f"{PREFIX}_loader_batches_delivered",
            "batches main's iterators of a DataLoader delivered while watched, every epoch's (inside view): "
            "unlike dlwatch_loader_batches it does not start again at 0 with each iterator",
            labels=rank_labels + ["loader"],
        )
        wait = GaugeMetricFamily(
            f"{PREFIX}_loader_data_wait_seconds",
            "time main waited in __next__ of the latest iterator (inside view), the wait in progress included: "
            "it rises through a stall, not only when the wait ends",
            labels=rank_labels + ["loader"],
        )
        worker_time = CounterMetricFamily(
            f"{PREFIX}_worker_seconds",
            "wall time of the DataLoader workers by state, summed per worker id over the job (NOTE [ Input-bound "
            "verdict ]): cpu (computing), runnable (waiting for a CPU), io (blocked in the Dataset: I/O, a sleep, a "
            "lock), idle (waiting for indices); counted at each look for warnings",
            labels=rank_labels + ["worker_id", "state"],
        )
        verdict = GaugeMetricFamily(
            f"{PREFIX}_input_verdict",
            "1 for the input-bound verdict at the last look for warnings (watchdog.diagnose.throughput: "
            "not_input_bound, workers_cpu_bound, workers_io_bound, ...)",
            labels=rank_labels + ["verdict"],
        )
        host_done = False
        for status in self.watchers():
            sample, stall_s = status.sample, status.stall_s
            if sample is None:
                continue
            base = list(self._rank_labels(dict(status.rank_vars)))
            if stall_s is not None:
                since.add_metric(base, stall_s)
                progress_at.add_metric(base, sample.wall - stall_s)
            if self.stall_timeout_s:
                stall_timeout.add_metric(base, self.stall_timeout_s)
            if sample.main is not None:
                started.add_metric(base, sample.main.create_time)
            for worker_id, state, seconds in status.worker_seconds:
                worker_time.add_metric(base + [worker_id, state], seconds)
            if status.input_verdict is not None:
                verdict.add_metric(base + [str(status.input_verdict.verdict)], 1.0)
            ids = self._worker_ids(sample)
            for p in sample.processes:
                if p.role not in (ROLE_MAIN, ROLE_WORKER):
                    continue
                values = base + [str(p.role), ids.get(p.pid, "")]
                cpu.add_metric(values, p.cpu_s)
                rss.add_metric(values, p.rss_bytes)
                threads.add_metric(values, p.num_threads)
                for family, value in (
                    (uss, p.uss_bytes),
                    (pss, p.pss_bytes),
                    (fds, p.num_fds),
                    (max_fds, p.rlimit_nofile_soft),
                    (pinned, p.pinned_bytes),
                ):
                    if value is not None:
                        family.add_metric(values, value)
            latest: Dict[str, LoaderView] = {}
            for v in sample.loaders:
                where = _loader_label(v.site)
                if where not in latest or v.iterator > latest[where].iterator:
                    latest[where] = v
            for where, v in latest.items():
                batches.add_metric(base + [where], v.batches)
                wait.add_metric(base + [where], v.wait_s + _waiting_s(v, sample.t_mono))
            totals: Counter = Counter()
            for site, n in status.delivered:
                totals[_loader_label(site)] += n
            for where, n in sorted(totals.items()):
                delivered.add_metric(base + [where], n)
            for where, v in latest.items():
                if v.waiting_since is None or v.waiting_worker >= 0:  # in __next__ for no worker's batch: unknown
                    waiting.add_metric(base + [where], 0.0 if v.waiting_since is None else 1.0)
            if not host_done:
                host_done = True
                if sample.host.shm_used_bytes is not None:
                    shm_used.add_metric([self.node], sample.host.shm_used_bytes)
                if sample.host.shm_total_bytes is not None:
                    shm_size.add_metric([self.node], sample.host.shm_total_bytes)
        reports = CounterMetricFamily(
            f"{PREFIX}_reports",
            "reports written, by mode (hang, crash, live, exit) and kind",
            labels=["node", "rank", "mode", "kind"],
        )
        info = GaugeMetricFamily(
            f"{PREFIX}_report_info",
            "1 for each report written (the latest 256): its first diagnosis, mode, severity and folder on this node",
            labels=rank_labels + ["mode", "kind", "severity", "folder"],
        )
        with self._lock:
            for (mode, kind, rank), n in sorted(self._reports.items()):
                reports.add_metric([self.node, rank, mode, kind], n)
            for written_labels, w in self._written:
                info.add_metric(
                    list(written_labels) + [w.mode, w.kind, w.severity, redact.value(w.folder)],
                    1,
                )
        yield from (
            cpu,
            rss,
            pss,
            uss,
            fds,
            max_fds,
            threads,
            pinned,
            since,
            progress_at,
            stall_timeout,
            started,
            shm_used,
            shm_size,
            batches,
            delivered,
            wait,
            waiting,
            worker_time,
            verdict,
            reports,
            info,
        )


# NOTE [ The metrics server ]
# The endpoint is open to every local user (and to the network where metrics_addr says so), none
# of them authenticated, so a client may only hold what a scrape needs, and only briefly:
# * one thread runs a ``selectors`` loop; no socket is ever read or written blocking, so one slow
#   client never holds up another;
# * a request must be complete (headers, and a body of at most MAX_BODY_BYTES) within
#   REQUEST_DEADLINE_S of its accept, in all, not per read: a client that drips its headers a
#   byte at a time is closed at the deadline however often it sends;
# * at most MAX_CONNECTIONS connections are held (each a descriptor of dlwatch's, which its own
#   /proc reads need); one more evicts the oldest still sending its request (else the oldest),
#   so a connection just made, a scrape's, is the last one evicted;
# * a request is read as soon as it is accepted (a scraper sends it with the connect), answered at
#   once, and its response handed to the kernel without blocking: a client that does not read
#   its response is closed RESPONSE_DEADLINE_S after the response was made;
# * one request per connection (``Connection: close``), as prometheus_client's WSGI server did.
# HTTP is parsed by h11 (https://h11.readthedocs.io), the body made by prometheus_client's own
# ``choose_encoder`` (Prometheus text or OpenMetrics, by the Accept header) and gzipped where
# Accept-Encoding allows, as ``prometheus_client.make_wsgi_app`` does.

# Connections held at once (a new one evicts the oldest still sending its request).
MAX_CONNECTIONS = 64
# Seconds from accept in which a connection must have sent its whole request.
REQUEST_DEADLINE_S = 5.0
# Seconds from a request's answer being made in which the client must have taken all of it.
RESPONSE_DEADLINE_S = 10.0
# Largest request head (request line and headers), in bytes: more is answered 431.
MAX_HEADER_BYTES = 16 * 1024
# Largest request body, in bytes (a scrape has none): more is answered 413.
MAX_BODY_BYTES = 64 * 1024
# Connections waiting in the kernel to be accepted (socketserver's default was 5).
BACKLOG = 128
# Seconds the server stops accepting after accept() failed for want of descriptors or memory.
ACCEPT_BACKOFF_S = 0.05
_RECV_BYTES = 64 * 1024
_ALLOW = [("Allow", "OPTIONS,GET")]


def _reason(status: int) -> str:
    """The reason phrase of an HTTP status (``http.HTTPStatus``), "" for one it does not know."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


class _Conn:
    """One client: its socket, its h11 state, its deadline (monotonic seconds) and its unsent
    response (``None`` while its request is being read)."""

    __slots__ = ("sock", "h11", "deadline", "body_bytes", "request", "out")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock = sock
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.deadline = now + REQUEST_DEADLINE_S
        self.body_bytes = 0
        self.request: Optional[h11.Request] = None
        self.out: Optional[bytearray] = None


class MetricsServer:
    """Serves ``registry`` at ``http://ADDR:PORT/`` (any path, ``/metrics`` the documented one;
    ``/favicon.ico`` an empty page) from one thread, as NOTE [ The metrics server ] says.

    ``serve_forever()`` runs the loop until ``shutdown()``; ``server_close()`` closes every socket;
    ``server_address`` is the bound address (``(host, port)``, or the IPv6 4-tuple).
    """

    def __init__(self, sock: socket.socket, registry: CollectorRegistry) -> None:
        self.socket = sock
        self.registry = registry
        self.server_address = sock.getsockname()
        self._conns: Dict[socket.socket, _Conn] = {}  # in order of accept: the oldest first
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._closed = False

    def serve_forever(self) -> None:
        """Accept, read, answer and close clients until :meth:`shutdown`. An error with one client
        closes that client only."""
        self._stopped.clear()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                wait_s = min((c.deadline for c in self._conns.values()), default=now + 1.0) - now
                for key, _mask in self._selector.select(min(max(wait_s, 0.0), 1.0)):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    else:
                        conn = self._conns.get(key.fileobj)  # type: ignore[call-overload]
                        if conn is not None:  # not closed earlier in this round
                            self._step(conn)
                now = time.monotonic()
                for conn in [c for c in self._conns.values() if c.deadline <= now]:
                    self._close(conn)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait (at most 5 s) until it has returned."""
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # already woken (buffer full), or closed
        self._stopped.wait(5.0)

    def server_close(self) -> None:
        """Close the listening socket and every client's (stopping the loop first)."""
        if self._closed:
            return
        self.shutdown()
        self._closed = True
        for conn in list(self._conns.values()):
            self._close(conn)
        self._selector.close()
        for s in (self.socket, self._wake_r, self._wake_w):
            s.close()

    def fileno(self) -> int:
        return self.socket.fileno()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _accept(self) -> None:
        """Accept every waiting connection (at most a backlog's), evicting the oldest to stay
        within MAX_CONNECTIONS, and read each one's request at once."""
        for _ in range(BACKLOG):
            try:
                sock, _addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # gone before it was accepted
            except OSError:  # EMFILE, ENFILE, ENOBUFS: the listening socket stays readable, so
                time.sleep(ACCEPT_BACKOFF_S)  # a pause, not a loop spinning until they pass
                return
            if len(self._conns) >= MAX_CONNECTIONS:
                reading = (c for c in self._conns.values() if c.out is None)
                self._close(next(reading, None) or next(iter(self._conns.values())))
            conn = _Conn(sock, time.monotonic())
            try:
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ)
            except (OSError, ValueError):
                sock.close()
                continue
            self._conns[sock] = conn
            self._step(conn)

    def _step(self, conn: _Conn) -> None:
        """Read what ``conn`` sent, or send it what it has not taken; close it on an error."""
        try:
            if conn.out is None:
                self._read(conn)
            else:
                self._write(conn)
        except Exception:  # a client's error is no news for dlwatch's stderr, nor may it stop the loop
            self._close(conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        conn.h11.receive_data(data)  # b"": the client closed its side
        while True:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError as e:
                status = e.error_status_hint  # 400, or 431 for a head over MAX_HEADER_BYTES
                self._answer(conn, status, [], f"# HTTP {status} {_reason(status)}\n".encode())
                return
            if event is h11.NEED_DATA:
                if not data:
                    self._close(conn)
                return
            if isinstance(event, h11.Request):
                conn.request = event
            elif isinstance(event, h11.Data):
                conn.body_bytes += len(event.data)
                if conn.body_bytes > MAX_BODY_BYTES:
                    self._answer(conn, 413, [], b"# HTTP 413: a scrape has no body\n")
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._answer(conn, *self._page(conn.request))
                return
            else:  # ConnectionClosed, PAUSED
                self._close(conn)
                return

    def _page(self, request: Optional[h11.Request]) -> Tuple[int, List[Tuple[str, str]], bytes]:
        """``(status, headers, body)`` for ``request``, as ``prometheus_client.make_wsgi_app``
        answers it (OPTIONS, GET; any path the metrics but ``/favicon.ico``)."""
        assert request is not None
        method = request.method.decode("latin-1")
        if method == "OPTIONS":
            return 200, list(_ALLOW), b""
        if method != "GET":
            return 405, list(_ALLOW), f"# HTTP 405 Method Not Allowed: {method}; use OPTIONS or GET\n".encode()
        path, _, query = request.target.decode("latin-1").partition("?")
        if path == "/favicon.ico":
            return 200, [], b""
        headers: Dict[str, str] = {}
        for name, value in request.headers:  # h11 gives names lower-case
            key = name.decode("latin-1")
            headers[key] = f"{headers[key]},{value.decode('latin-1')}" if key in headers else value.decode("latin-1")
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        params = parse_qs(query)
        registry: Collector = self.registry
        if "name[]" in params:
            registry = self.registry.restricted_registry(params["name[]"])
        try:
            body = encoder(registry)
        except Exception as e:  # a collector's bug: the scraper sees it, the loop goes on
            return 500, [], f"# HTTP 500: {type(e).__name__}\n".encode()
        out = [("Content-Type", content_type)]
        if gzip_accepted(headers.get("accept-encoding", "")):
            body = gzip.compress(body)
            out.append(("Content-Encoding", "gzip"))
        return 200, out, body

    def _answer(self, conn: _Conn, status: int, headers: List[Tuple[str, str]], body: bytes) -> None:
        """Make ``conn``'s response, stop reading it, and send what the kernel takes now."""
        if conn.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self._close(conn)
            return
        head = headers + [("Content-Length", str(len(body))), ("Connection", "close")]
        out = bytearray(conn.h11.send(h11.Response(status_code=status, headers=head, reason=_reason(status))) or b"")
        if body and (conn.request is None or conn.request.method != b"HEAD"):
            out += conn.h11.send(h11.Data(data=body)) or b""
        out += conn.h11.send(h11.EndOfMessage()) or b""
        conn.out = out
        conn.deadline = time.monotonic() + RESPONSE_DEADLINE_S
        self._selector.modify(conn.sock, selectors.EVENT_WRITE)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        del conn.out[:sent]
        if not conn.out:
            self._close(conn)  # all of it is the kernel's to deliver

    def _close(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock, None) is None:
            return
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()


def serve(port: int, collector: JobMetrics, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve ``collector`` at ``http://ADDR:PORT/metrics`` from a daemon thread (IPv6 where
    ``addr`` has a ``:``), as NOTE [ The metrics server ] says: at most ``MAX_CONNECTIONS``
    connections held, each request complete within ``REQUEST_DEADLINE_S`` seconds of its accept
    and its response taken within ``RESPONSE_DEADLINE_S`` seconds.

    Returns the server (``shutdown()`` stops it, ``server_close()`` closes its sockets,
    ``server_address`` is where it listens).

    Raises:
        OSError: the port cannot be bound (in use, no permission, an address not of this host);
            ``socket.gaierror`` where ``addr`` does not resolve.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as socketserver's allow_reuse_address
        sock.bind((addr, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    server = MetricsServer(sock, registry)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
