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

import socket
import socketserver
import threading
from collections import Counter
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from . import redact
from .types import ROLE_MAIN, ROLE_WORKER, Frame, LoaderView, ReportWritten, Sample

if TYPE_CHECKING:
    from .daemon import WatcherStatus

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


class JobMetrics(Collector):
    """A collector over the job's watchers.

    Args:
        watchers: returns, at scrape time, what each rank's watcher last saw
            (:class:`~watchdog.daemon.WatcherStatus`: its rank variables, latest sample and
            seconds since progress); one entry, with no rank, for a single-process job.
        node: the ``node`` label of every series (the ``node`` setting, else the host name).
        stall_timeout_s: the sidecar's ``stall_timeout_s``, served so that ``dlwatch cluster``
            judges a rank stalled as its own sidecar does (0: not served).
    """

    def __init__(
        self, watchers: Callable[[], List["WatcherStatus"]], node: str = "", stall_timeout_s: float = 0.0
    ) -> None:
        self.watchers = watchers
        self.node = redact.value(node or socket.gethostname())
        self.stall_timeout_s = stall_timeout_s
        self._reports: Counter = Counter()
        self._written: List[Tuple[Tuple[str, ...], ReportWritten]] = []
        self._lock = threading.Lock()

    def note_report(self, written: ReportWritten) -> None:
        """Count one report (``written.mode``: hang, crash, live, exit) of ``written.kind``, and
        keep it for ``dlwatch_report_info`` (its folder redacted, as every byte dlwatch serves)."""
        with self._lock:
            self._reports[(written.mode, written.kind, written.rank)] += 1
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
        uss = GaugeMetricFamily(
            f"{PREFIX}_process_unique_memory_bytes",
            "USS of a process of the job (read every full_info_interval_s)",
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
            "time main waited in __next__ of the latest iterator (inside view)",
            labels=rank_labels + ["loader"],
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
                wait.add_metric(base + [where], v.wait_s)
            totals: Counter = Counter()
            for site, n in status.delivered:
                totals[_loader_label(site)] += n
            for where, n in sorted(totals.items()):
                delivered.add_metric(base + [where], n)
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
            reports,
            info,
        )


# Connections served at once; one more is closed at once (a scraper retries at its next
# interval). Each holds a thread and a descriptor of dlwatch's, which its own /proc reads need.
MAX_CONNECTIONS = 8
# Seconds a connection may stay idle (no request, or a request sent slowly) before it is closed.
IDLE_TIMEOUT_S = 10.0


class _Handler(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT_S  # socketserver.StreamRequestHandler: a socket timeout per connection

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass  # no line on stderr per scrape


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """prometheus_client's WSGI app behind a threading server with at most ``MAX_CONNECTIONS``
    connections, each closed after ``IDLE_TIMEOUT_S`` idle (``prometheus_client.start_http_server``
    bounds neither: idle connections held a thread and a descriptor each, until dlwatch's own
    ``/proc`` reads failed with EMFILE)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args, **kwargs) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: this one is closed at once
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def handle_error(self, request, client_address):
        pass  # a client that timed out or went away is no news for dlwatch's stderr

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Server6(_Server):
    address_family = socket.AF_INET6


def serve(port: int, collector: JobMetrics, addr: str = "127.0.0.1"):
    """Serve ``collector`` at ``http://ADDR:PORT/metrics`` in a daemon thread, at most
    ``MAX_CONNECTIONS`` connections at once, each closed after ``IDLE_TIMEOUT_S`` seconds idle.

    Returns the server (``shutdown()`` stops it).

    Raises:
        OSError: the port cannot be bound (in use, no permission, an address not of this host).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server_class = _Server6 if ":" in addr else _Server
    server = make_server(addr, port, make_wsgi_app(registry), server_class, handler_class=_Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
