"""Prometheus metrics (``--metrics-port``): what the watchdog sees, served by ``prometheus_client``.

Values are read at scrape time from what the watch loop last recorded (each watcher's latest
sample and stall), never by touching the job's processes. Labels are ``rank``, ``role`` and
``worker_id``, never a pid: workers get new pids every epoch, and pid labels would grow the
series count without bound. Names follow the Prometheus conventions (base units, ``_bytes``,
``_seconds``, ``_total``; https://prometheus.io/docs/practices/naming/).
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections import Counter
from typing import Callable, Dict, Iterable, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from . import redact
from .types import ROLE_MAIN, ROLE_WORKER, LoaderView, Sample

PREFIX = "dlwatch"


class JobMetrics(Collector):
    """A collector over the job's watchers.

    Args:
        watchers: returns ``[(rank label, latest sample or None, seconds since progress or None)]``
            at scrape time; the rank label is empty for a single-process job.
    """

    def __init__(self, watchers: Callable[[], List[Tuple[str, Optional[Sample], Optional[float]]]]) -> None:
        self.watchers = watchers
        self._reports: Counter = Counter()
        self._lock = threading.Lock()

    def note_report(self, mode: str, kind: str, rank: str = "") -> None:
        """Count one report (``mode``: hang, crash, live, exit) of ``kind``."""
        with self._lock:
            self._reports[(mode, kind, rank)] += 1

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
        labels = ["rank", "role", "worker_id"]
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
            labels=["rank"],
        )
        shm_used = GaugeMetricFamily(f"{PREFIX}_shm_used_bytes", "bytes used in /dev/shm as the job sees it")
        shm_size = GaugeMetricFamily(f"{PREFIX}_shm_size_bytes", "size of /dev/shm as the job sees it")
        batches = GaugeMetricFamily(
            f"{PREFIX}_loader_batches",
            "batches the latest iterator of a DataLoader has delivered (inside view)",
            labels=["rank", "loader"],
        )
        wait = GaugeMetricFamily(
            f"{PREFIX}_loader_data_wait_seconds",
            "time main waited in __next__ of the latest iterator (inside view)",
            labels=["rank", "loader"],
        )
        host_done = False
        for rank, sample, stall_s in self.watchers():
            if sample is None:
                continue
            if stall_s is not None:
                since.add_metric([rank], stall_s)
            ids = self._worker_ids(sample)
            for p in sample.processes:
                if p.role not in (ROLE_MAIN, ROLE_WORKER):
                    continue
                values = [rank, p.role, ids.get(p.pid, "")]
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
                # the job names its files: a label is redacted like every byte dlwatch writes
                where = redact.value(f"{v.site.file.rsplit('/', 1)[-1]}:{v.site.line}") if v.site else "?"
                if where not in latest or v.iterator > latest[where].iterator:
                    latest[where] = v
            for where, v in latest.items():
                batches.add_metric([rank, where], v.batches)
                wait.add_metric([rank, where], v.wait_s)
            if not host_done:
                host_done = True
                if sample.host.shm_used_bytes is not None:
                    shm_used.add_metric([], sample.host.shm_used_bytes)
                if sample.host.shm_total_bytes is not None:
                    shm_size.add_metric([], sample.host.shm_total_bytes)
        reports = CounterMetricFamily(
            f"{PREFIX}_reports",
            "reports written, by mode (hang, crash, live, exit) and kind",
            labels=["rank", "mode", "kind"],
        )
        with self._lock:
            for (mode, kind, rank), n in sorted(self._reports.items()):
                reports.add_metric([rank, mode, kind], n)
        yield from (cpu, rss, uss, fds, max_fds, threads, pinned, since, shm_used, shm_size, batches, wait, reports)


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
