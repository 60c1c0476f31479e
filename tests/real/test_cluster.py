"""``dlwatch cluster`` against a real Prometheus server (and, without one, against a server that
answers one byte at a time): two "nodes" on this machine, each a
``dlwatch run --metrics-port`` with its own ``node`` setting, scraped every second by a
Prometheus the test starts (loopback port, its own storage folder). Node a's DataLoader
deadlocks (an inherited lock, reported, not ended); node b's job keeps delivering batches.
``cluster`` must name node a's job as the first to stall, with its report's folder, and show
node b as moving. Every process and the server are ended whatever happens. Skipped where
Debian's ``prometheus`` is not installed."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from tests.real.helpers import DLWATCH, TRAIN, kill_tree, start, wait_for

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="prometheus is not installed (apt-get install prometheus)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(tmp_path, name: str, port: int, job):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"node: {name}\nstall_timeout_s: 4\n")
    cmd = DLWATCH + ["run", "--config", str(cfg), "--metrics-port", str(port), "--report-dir", str(tmp_path / name)]
    return start(cmd + ["--"] + job, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@needs_prometheus
def test_cluster_names_the_node_whose_loader_stalled_first(tmp_path):
    ports = {"node-a": _free_port(), "node-b": _free_port()}
    prom_port = _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: dlwatch\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{ports['node-a']}', '127.0.0.1:{ports['node-b']}']}}]\n"
    )
    procs = []
    try:
        procs.append(_node(tmp_path, "node-a", ports["node-a"], TRAIN + ["--fault", "fork-lock", "--num-workers", "2"]))
        healthy = TRAIN + ["--num-workers", "2", "--epochs", "100", "--samples", "400", "--sample-delay-s", "0.02"]
        procs.append(_node(tmp_path, "node-b", ports["node-b"], healthy))
        procs.append(
            start(
                [
                    "prometheus",
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        url = f"http://127.0.0.1:{prom_port}"

        def stalled_in_prometheus():
            q = urllib.request.quote('dlwatch_seconds_since_progress{node="node-a"} > 10')
            try:
                doc = json.loads(urllib.request.urlopen(f"{url}/api/v1/query?query={q}", timeout=5).read())
            except OSError:
                return None
            return doc["data"]["result"] or None

        wait_for(stalled_in_prometheus, 120, "node-a's stall in Prometheus", interval_s=1.0)
        time.sleep(2)  # a scrape of node b after it too
        done = subprocess.run(
            DLWATCH + ["cluster", "--prometheus", url, "--stalled-after", "8", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, done.stderr
        doc = json.loads(done.stdout)
        by_node = {r["node"]: r for r in doc["ranks"]}
        assert set(by_node) == {"node-a", "node-b"}, doc
        assert [r["node"] for r in doc["stalled"]] == ["node-a"], doc["stalled"]
        assert doc["verdict"].startswith("the job on node-a stalled first"), doc["verdict"]
        assert by_node["node-a"]["report_mode"] == "hang" and "-node-a-" in by_node["node-a"]["report_folder"]
        # a job without ranks is its own row, never taken for a launcher's; its loader's hang is its cause
        assert by_node["node-a"]["agent"] is False and by_node["node-a"]["cause"] == "loader stalled", by_node
        assert doc["first"] == {"node": "node-a", "rank": ""} and doc["tied"] == []
        assert "its report: node-a:" in doc["verdict"]
        assert by_node["node-b"]["since_progress_s"] < 8 and by_node["node-b"]["batches"] > 0
        table = subprocess.run(
            DLWATCH + ["cluster", "--prometheus", url, "--stalled-after", "8"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert table.returncode == 1 and "stalled" in table.stdout and "moving" in table.stdout, table.stdout
        # node b's job ends (its sidecar with it): a sidecar down, judged by its last age, not stalled
        kill_tree(procs[1])
        q = urllib.request.quote('up{job="dlwatch"} == 0')
        wait_for(
            lambda: json.loads(urllib.request.urlopen(f"{url}/api/v1/query?query={q}", timeout=5).read())["data"][
                "result"
            ],
            30,
            "node b's sidecar seen down",
            interval_s=1.0,
        )
        time.sleep(10)  # longer than --stalled-after: its age must not keep growing
        done = subprocess.run(
            DLWATCH + ["cluster", "--prometheus", url, "--stalled-after", "8", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        doc = json.loads(done.stdout)
        by_node = {r["node"]: r for r in doc["ranks"]}
        assert by_node["node-b"]["up"] is False and by_node["node-b"]["since_progress_s"] < 8, by_node["node-b"]
        assert [r["node"] for r in doc["stalled"]] == ["node-a"], doc["stalled"]
    finally:
        for p in procs:
            kill_tree(p)


def test_cluster_without_prometheus_is_a_one_line_error():
    done = subprocess.run(
        DLWATCH + ["cluster", "--prometheus", f"http://127.0.0.1:{_free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "cannot be reached" in done.stderr, done.stderr


def test_a_server_dripping_one_byte_at_a_time_ends_at_the_commands_deadline():
    """A "Prometheus" that sends its answer one byte every 2 s (under the 10 s of one read) for
    up to 150 s: ``cluster`` gives up at its own deadline (30 s by default), one line naming the
    URL, exit 2 (README "Exit codes"); it used to wait for as long as the bytes came."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def drip() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n" + b"{" * 99:
                    if stop.wait(2.0):
                        return
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break

    threading.Thread(target=drip, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        began = time.monotonic()
        done = subprocess.run(DLWATCH + ["cluster", "--prometheus", url], capture_output=True, text=True, timeout=90)
        took = time.monotonic() - began
    finally:
        stop.set()
        listener.close()
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and url in done.stderr and "within 30 s" in done.stderr, done.stderr
    assert 29 <= took < 30 + 45, took
