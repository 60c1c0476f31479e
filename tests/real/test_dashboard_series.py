"""What the dashboard reads during a stall, scraped from a real job under ``dlwatch run
--metrics-port``: the data-wait series rises while main waits in ``__next__`` for a batch that
never comes (it used to grow only when a wait ended: the dashboard's data-wait share read 0 %
for the whole stall), and each process's PSS is served. Bounded; every process group it starts
is killed."""

from __future__ import annotations

import socket
import textwrap
import time
import urllib.request

from tests.real.helpers import DLWATCH, PY, kill_tree, start, wait_for

STALLS = textwrap.dedent(
    """
    import threading, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Data(Dataset):
        def __len__(self):
            return 1000
        def __getitem__(self, i):
            if i >= 16:
                threading.Event().wait()  # the worker blocks for good: main waits in __next__
            return torch.ones(2)

    for _ in DataLoader(Data(), batch_size=2, num_workers=1):
        time.sleep(0.05)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict:
    """``{series name: [(labels, value), …]}`` served now; empty when the endpoint does not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_the_data_wait_series_rises_between_two_scrapes_during_a_stall(tmp_path):
    script = tmp_path / "stalls.py"
    script.write_text(STALLS)
    port = _free_port()
    # a stall is never examined here (600 s): the series are read while it lasts
    cmd = DLWATCH + ["run", "--metrics-port", str(port), "--report-dir", str(tmp_path), "--stall-timeout", "600"]
    proc = start(cmd + ["--", PY, str(script)])
    try:

        def stalled():
            got = _scrape(port)
            since = [v for _, v in got.get("dlwatch_seconds_since_progress", ())]
            waits = [v for _, v in got.get("dlwatch_loader_data_wait_seconds", ())]
            return (got, time.monotonic()) if since and since[0] >= 3 and waits else None

        first, t1 = wait_for(stalled, 180, "a stalled loader in the metrics")
        time.sleep(5)
        second, t2 = _scrape(port), time.monotonic()
        (w1,) = [v for _, v in first["dlwatch_loader_data_wait_seconds"]]
        (w2,) = [v for _, v in second["dlwatch_loader_data_wait_seconds"]]
        # the share rate() would show: near 1 through the stall (the sample lags a tick or two)
        assert (w2 - w1) / (t2 - t1) >= 0.5, (w1, w2, t2 - t1)

        def pss():
            return {ls["role"]: v for ls, v in _scrape(port).get("dlwatch_process_proportional_memory_bytes", ())}

        by_role = wait_for(lambda: len(pss()) == 2 and pss(), 60, "PSS of main and its worker")
        assert by_role.get("main", 0) > 0 and by_role.get("dataloader_worker", 0) > 0, by_role
        assert proc.poll() is None  # still stalled: nothing examined or ended it
    finally:
        kill_tree(proc)
