"""A job across two "nodes" on this machine: two ``dlwatch run --metrics-port … --node …``,
each starting ``torchrun --nnodes 2 --node-rank K --nproc-per-node 2`` (c10d rendezvous on
loopback, gloo, CPU), scraped every second by a real Prometheus the test starts; node b's
starts once Prometheus has scraped node a's sidecar serving its torchrun agent's own row
while it waits at the rendezvous (Prometheus keeps that row an hour). Rank 3 (local rank 1 of
whichever node joined the rendezvous second: c10d numbers by arrival, not by ``--node-rank``)
has DataLoader workers that block at sample 64 (its ninth batch); every step ends in an
all-reduce, so the other ranks stop one batch later, within a step (0.25 s) of it, waiting
there (issue #37 section 2: every last progress in the same second, and the verdict named
"the job on n0", the agent's row). ``dlwatch cluster``, with
and without ``--run-id``, must name rank 3 and its node as the first to stall by cause (its
loader stalled, the others wait outside theirs), never an agent's row, list all four ranks
with their nodes, and give rank 3's report, and the shipped alert rules
(docs/prometheus/alerts.yaml, loaded by the server) must raise the hang report's alert for
that rank and node. A healthy twin: nothing stalls, ``cluster`` exits 0, no alert fires. Every
process and the server are ended whatever happens; skipped without Debian's ``prometheus``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import textwrap
import time
import urllib.parse
import urllib.request

import pytest

from tests.real.helpers import DLWATCH, PY, ROOT, kill_tree, start, wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="prometheus is not installed (apt-get install prometheus)"
)

JOB = textwrap.dedent(
    """
    import os, threading, time, torch, torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset

    STUCK_RANK = int(os.environ.get("STUCK_RANK", "-1"))

    class Frames(Dataset):
        def __len__(self):
            return 100000
        def __getitem__(self, i):
            if int(os.environ["RANK"]) == STUCK_RANK and i >= 64:
                threading.Event().wait()   # this rank's workers block forever
            return torch.ones(4)

    def main():
        dist.init_process_group("gloo")
        total = torch.zeros(1)
        for step, x in enumerate(DataLoader(Frames(), batch_size=8, num_workers=2)):
            total += x.sum()
            time.sleep(0.25)
            dist.all_reduce(total)   # every rank waits here for the others, every step
            if step == int(os.environ.get("STEPS", "100000")):
                break
        dist.destroy_process_group()

    if __name__ == "__main__":
        main()
    """
)


ALERTS = os.path.join(ROOT, "docs", "prometheus", "alerts.yaml")
# node a's torchrun agent, alone at the rendezvous: its sidecar serves the agent's own row
AGENT_ROW = 'last_over_time(dlwatch_last_progress_timestamp_seconds{rank="", node="node-a"}[1h])'


def _firing(url: str) -> list:
    """The alerts Prometheus has firing (``/api/v1/alerts``), as their label dicts."""
    try:
        alerts = json.loads(urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=5).read())["data"]["alerts"]
    except OSError:
        return []
    return [a["labels"] for a in alerts if a["state"] == "firing"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(url: str, expr: str):
    q = urllib.parse.urlencode({"query": expr})
    try:
        return json.loads(urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5).read())["data"]["result"]
    except OSError:
        return []


def _two_nodes(tmp_path, stuck_rank: int, steps: int):
    script = tmp_path / "train_two_nodes.py"
    script.write_text(JOB)
    rdzv = _free_port()
    ports = [_free_port(), _free_port()]
    prom = _free_port()
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{ALERTS}]\n"  # the shipped alert rules
        f"scrape_configs:\n  - job_name: dlwatch\n    static_configs: [{{targets: [{targets}]}}]\n"
    )
    env = {**os.environ, "STUCK_RANK": str(stuck_rank), "STEPS": str(steps)}
    url = f"http://127.0.0.1:{prom}"
    procs = [
        start(
            [
                "prometheus",
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        for k, name in enumerate(("node-a", "node-b")):
            if k:
                # node a's agent waits at the rendezvous meanwhile: node b starts once Prometheus has
                # scraped that agent's own row (under load, a fixed pause could end before the first
                # scrape, and the row was never seen)
                wait_for(lambda: _query(url, AGENT_ROW), 120, "node a's agent row in Prometheus", interval_s=1.0)
            torchrun = [PY, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(k)]
            torchrun += ["--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{rdzv}"]
            torchrun += ["--rdzv-id", "job42", str(script)]
            cmd = DLWATCH + ["run", "--node", name, "--metrics-port", str(ports[k]), "--stall-timeout", "5"]
            cmd += ["--report-dir", str(tmp_path / "reports"), "--"] + torchrun  # one shared report_dir
            procs.append(start(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    except BaseException:
        for p in procs:
            kill_tree(p)
        raise
    return procs, url


def _all_four(url: str, expr: str, what: str) -> None:
    """Wait until ``expr`` holds for the job's four ranks in Prometheus."""
    wait_for(lambda: len(_query(url, expr)) == 4, 180, f"{what} in Prometheus", interval_s=1.0)


def _cluster(url: str, *args: str):
    done = subprocess.run(
        DLWATCH + ["cluster", "--prometheus", url, *args],  # stalled: by each stall_timeout_s
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "--json" not in args:
        return done.returncode, done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr


def test_cluster_names_the_rank_whose_loader_stalled_by_cause_when_every_rank_stops_within_a_second(tmp_path):
    procs, url = _two_nodes(tmp_path, stuck_rank=3, steps=100000)
    try:
        _all_four(url, 'dlwatch_seconds_since_progress{run_id="job42"} > 12', "all four ranks stalled")
        wait_for(lambda: _query(url, 'dlwatch_report_info{rank="3"}'), 60, "rank 3's report in Prometheus", 1.0)
        # the launcher's row: served while node a's agent waited for node b, kept by Prometheus
        agents = _query(url, AGENT_ROW)
        assert {a["metric"]["node"] for a in agents} == {"node-a"}, agents
        for args in ([], ["--run-id", "job42"]):  # without: the agents' rows are listed too
            code, doc, err = _cluster(url, *args, "--json")
            assert code == 1, err
            ranks = {r["rank"]: r for r in doc["ranks"] if r["rank"]}
            # c10d numbers the nodes' ranks in the order the nodes joined: rank 3 is on either
            node = ranks["3"]["node"]
            verdict = doc["verdict"]
            assert verdict.startswith(f"rank 3 on {node} stalled first by cause ("), verdict  # old: "the job on …"
            assert sorted(ranks) == ["0", "1", "2", "3"] and ranks["2"]["node"] == node
            assert {ranks["0"]["node"], node} == {"node-a", "node-b"} and ranks["1"]["node"] == ranks["0"]["node"]
            assert ranks["3"]["local_rank"] == "1" and ranks["3"]["run_id"] == "job42"
            # the scene of issue #37: every rank stopped within one step (0.25 s) of rank 3, one
            # batch after it; dlwatch's last-progress times of ranks waiting in a collective
            # may be later still (a timed wait's wake-ups count as progress), never a lead to trust
            batches = {r: ranks[r]["batches"] for r in ranks}
            assert batches == {"0": 9, "1": 9, "2": 9, "3": 8}, (batches, [r["last_progress"] for r in ranks.values()])
            assert doc["first"] == {"node": node, "rank": "3"} and doc["tied"] == [], doc
            assert ranks["3"]["cause"] == "loader stalled" and "its DataLoader" in verdict, verdict
            waiting = [r for r in ("0", "1", "2") if ranks[r]["cause"] == "outside loader"]
            assert waiting == ["0", "1", "2"] and "wait outside their DataLoader" in verdict, (ranks, verdict)
            assert f"its report: {node}:" in verdict
            assert f"-{node}-" in ranks["3"]["report_folder"] and ranks["3"]["report_folder"].endswith("rank3")
            agent_rows = [r for r in doc["ranks"] if r["agent"]]
            assert all(r["rank"] == "" for r in agent_rows) and bool(agent_rows) == (not args), agent_rows
            assert all(r["rank"] for r in doc["stalled"]) and not verdict.startswith("the job"), doc["stalled"]
        # the table says each rank's node and cause, an agent's row as such
        code, table, err = _cluster(url)
        rows = [line.split() for line in table.splitlines()]
        assert code == 1 and [node, "3", "1", "stalled", "loader", "stalled"] in [r[:6] for r in rows], table
        assert any(r[1:4] == ["-", "-", "agent"] for r in rows), table
        # The shipped rules raise the hang report's alert, for rank 3 on its node.
        hang = {"alertname": "DataLoaderHangReported", "rank": "3", "node": node, "mode": "hang"}
        wait_for(lambda: any(hang.items() <= a.items() for a in _firing(url)), 30, "the alert", interval_s=1.0)
    finally:
        for p in procs:
            kill_tree(p)


def test_a_healthy_two_node_job_has_nothing_stalled(tmp_path):
    procs, url = _two_nodes(tmp_path, stuck_rank=-1, steps=100000)
    try:
        _all_four(url, 'dlwatch_loader_batches_delivered_total{run_id="job42"} > 20', "all four ranks' batches")
        time.sleep(3)
        code, doc, err = _cluster(url, "--run-id", "job42", "--json")
        assert code == 0, (err, doc)
        assert len(doc["ranks"]) == 4 and doc["stalled"] == [] and doc["verdict"] is None
        code, doc, err = _cluster(url, "--json")  # the agents' rows too: never stalled
        assert code == 0 and doc["stalled"] == [] and doc["verdict"] is None, (err, doc)
        assert _firing(url) == []  # the shipped rules raise nothing on a healthy job
    finally:
        for p in procs:
            kill_tree(p)
