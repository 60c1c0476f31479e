"""The metrics endpoint against clients that do not play fair (issue #33, item 2): clients
that drip their request a byte at a time, never finish it, or never read their response must
not keep a scrape from getting through. Real sockets against the real server, in this process.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import List

import psutil
import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from watchdog.watch import metrics

# What a slow client sends, a byte at a time: a request never finished (no blank line).
DRIP = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096


@pytest.fixture
def server():
    srv = metrics.serve(0, metrics.JobMetrics(lambda: []))
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _scrape(port: int, timeout_s: float = 10.0) -> bytes:
    """One scrape of ``/metrics``: its body; raises (HTTPError, OSError) where it fails."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
        assert response.status == 200
        return response.read()


def _valid_exposition(body: bytes) -> None:
    """``body`` parses as Prometheus text and holds dlwatch's families."""
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert {"dlwatch_reports", "dlwatch_process_cpu_seconds"} <= names, sorted(names)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset), without blocking (a socket with a
    timeout waits for data before its ``recv``, whatever the flags: hence ``poll`` first)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # ECONNRESET
        return True


class _Drippers:
    """``n`` clients that each send one byte of :data:`DRIP` every ``every_s`` seconds (well
    under any per-read timeout) and connect again whenever the server closes them, so that
    ``n`` slow clients press on the server the whole time. ``rounds`` counts the rounds sent."""

    def __init__(self, port: int, n: int, every_s: float = 1.0) -> None:
        self.port, self.n, self.every_s = port, n, every_s
        self.socks: List[socket.socket] = []
        self.sent = [0] * n
        self.rounds = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def _run(self) -> None:
        self.socks = [self._connect() for _ in range(self.n)]
        while not self.stop.is_set():
            for i in range(self.n):
                if _closed_by_server(self.socks[i]) or self.sent[i] >= len(DRIP):
                    self.socks[i].close()
                    self.socks[i], self.sent[i] = self._connect(), 0
                try:
                    self.socks[i].send(DRIP[self.sent[i] : self.sent[i] + 1])
                    self.sent[i] += 1
                except OSError:
                    self.sent[i] = len(DRIP)  # closed under us: a new one next round
            self.rounds += 1
            self.stop.wait(self.every_s)

    def __enter__(self) -> "_Drippers":
        self.thread.start()
        deadline = time.monotonic() + 30
        while self.rounds < 2:  # every one connected and dripping
            assert self.thread.is_alive() and time.monotonic() < deadline, "the slow clients did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [50, 2 * metrics.MAX_CONNECTIONS])
def test_slow_drip_clients_never_keep_a_scrape_out(server, n):
    """``n`` clients dripping a byte a second (old code: 8 of them held every slot, each read
    under the 10 s per-read timeout, and 0 of 20 scrapes got through); 20 scrapes in a row, over
    more than a request deadline, all succeed with valid exposition text."""
    port = server.server_address[1]
    with _Drippers(port, n) as drippers:
        for _ in range(20):
            _valid_exposition(_scrape(port))
            time.sleep(0.3)  # 20 scrapes span > REQUEST_DEADLINE_S: drippers are closed and return meanwhile
        assert drippers.thread.is_alive() and drippers.rounds >= 3  # they pressed all along


@pytest.mark.timeout(60)
def test_a_client_that_never_finishes_its_request_is_closed_at_the_deadline_however_often_it_sends(server):
    port = server.server_address[1]
    deadline_s = metrics.REQUEST_DEADLINE_S
    started = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        for i in range(len(DRIP)):
            if _closed_by_server(sock):
                break
            try:
                sock.send(DRIP[i : i + 1])
            except OSError:
                break
            assert time.monotonic() - started < deadline_s + 20, "a dripping client was never closed"
            time.sleep(0.1)  # a byte every 0.1 s: any per-read timeout is never reached
        else:
            pytest.fail("the whole drip was taken")
        elapsed = time.monotonic() - started
        assert elapsed >= deadline_s - 0.1, f"closed after {elapsed:.1f} s, before the {deadline_s} s deadline"
    finally:
        sock.close()
    _valid_exposition(_scrape(port))


class _BigMetrics(metrics.JobMetrics):
    """dlwatch's families and one of about 8 MB: more than the kernel buffers of a client that
    reads nothing (tcp_wmem's 4 MB default maximum plus a 4 KiB receive buffer)."""

    def collect(self):
        yield from super().collect()
        pad = GaugeMetricFamily("dlwatch_test_padding", "8 MB of series", labels=["pad"])
        for i in range(2000):
            pad.add_metric([f"{i}-" + "x" * 4000], 1)
        yield pad


@pytest.mark.timeout(90)
def test_clients_that_never_read_their_response_block_no_scrape_and_are_cut_off():
    """Ten clients send a scrape and never read it (old code: each held one of 8 threads in a
    blocked send until its 10 s timeout, so scrapes meanwhile were refused)."""
    srv = metrics.serve(0, _BigMetrics(lambda: []))
    port = srv.server_address[1]
    stuck: List[socket.socket] = []
    try:
        for _ in range(10):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            stuck.append(s)
        started = time.monotonic()
        for _ in range(5):
            body = _scrape(port, timeout_s=30)
            assert len(body) > 8_000_000
            _valid_exposition(body)
        # The ones that read nothing are cut off after RESPONSE_DEADLINE_S: reading now, each
        # gets less than its response, then the end.
        time.sleep(max(0.0, started + metrics.RESPONSE_DEADLINE_S + 1 - time.monotonic()))
        for s in stuck:
            s.settimeout(20)
            got = 0
            try:
                while chunk := s.recv(1 << 20):
                    got += len(chunk)
            except ConnectionResetError:
                pass
            assert 0 < got < 8_000_000
    finally:
        for s in stuck:
            s.close()
        srv.shutdown()
        srv.server_close()


def _held(port: int) -> int:
    """Connections the server in this process holds: sockets of this process on ``port``
    with a peer (the clients' own sockets have ``port`` as their peer's)."""
    return sum(1 for c in psutil.Process().net_connections("tcp") if c.laddr and c.laddr.port == port and c.raddr)


@pytest.mark.timeout(60)
def test_idle_connections_past_the_bound_evict_the_oldest_and_a_scrape_still_gets_in(server):
    port = server.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3 * metrics.MAX_CONNECTIONS)]
    try:
        _valid_exposition(_scrape(port))  # at once: the newest connection is never the one evicted
        assert _held(port) <= metrics.MAX_CONNECTIONS
        assert sum(map(_closed_by_server, held[: 2 * metrics.MAX_CONNECTIONS - 1])) == 2 * metrics.MAX_CONNECTIONS - 1
    finally:
        for s in held:
            s.close()


def test_ipv6_options_other_methods_and_the_favicon_answer_as_prometheus_client_s_app():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        srv = metrics.serve(0, metrics.JobMetrics(lambda: []), "::1")
    except OSError as e:
        pytest.skip(f"cannot listen on ::1: {e}")
    try:
        base = f"http://[::1]:{srv.server_address[1]}"
        _valid_exposition(urllib.request.urlopen(f"{base}/metrics", timeout=10).read())
        openmetrics = urllib.request.Request(f"{base}/metrics", headers={"Accept": "application/openmetrics-text"})
        with urllib.request.urlopen(openmetrics, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            assert response.read().endswith(b"# EOF\n")
        with urllib.request.urlopen(urllib.request.Request(f"{base}/", method="OPTIONS"), timeout=10) as response:
            assert response.headers["Allow"] == "OPTIONS,GET"
        assert urllib.request.urlopen(f"{base}/favicon.ico", timeout=10).read() == b""
        with pytest.raises(urllib.error.HTTPError, match="405"):
            urllib.request.urlopen(urllib.request.Request(f"{base}/metrics", data=b"x", method="POST"), timeout=10)
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_scrape_as_prometheus_sends_it_gets_gzipped_openmetrics(server):
    """The headers of Prometheus 2.42's scraper (scrape/scrape.go): OpenMetrics preferred, gzip."""
    import gzip

    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

    accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.server_address[1]}/metrics",
        headers={"Accept": accept, "Accept-Encoding": "gzip", "X-Prometheus-Scrape-Timeout-Seconds": "10"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        text = gzip.decompress(response.read()).decode()
    assert "dlwatch_reports" in {family.name for family in openmetrics_families(text)}
