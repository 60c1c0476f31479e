"""``dlwatch cluster``'s verdict over hand-built rank rows and over hand-made Prometheus answers
served by real HTTP servers on loopback: the rank that stalled first by cause, then by its
node's clock, the lead over the next, a tie, a launcher's row never named, a sidecar that went
down, and what a hostile or broken "Prometheus" may not do."""

from __future__ import annotations

from dataclasses import replace

from watchdog.commands.cluster import RankRow, _of_this_run, first_stalled, judge, render


def _row(node, rank, last, since, up=True, folder="", timeout=None):
    return RankRow(node, rank, rank, "job42", f"{node}:9400", up, last, since, 10.0, 1.0, timeout, report_folder=folder)


def test_the_first_to_stall_is_the_earliest_last_progress_not_the_largest_age():
    rows = [
        _row("node-a", "0", 1000.0, 80.0),  # waits in a collective since 1000
        _row("node-b", "5", 959.0, 70.0, folder="/r/20261202T0000Z-node-b-9-rank5"),  # its age is smaller (skew)
        _row("node-b", "6", 1100.0, 2.0),  # still moving
    ]
    stalled, line = first_stalled(rows, 60.0)
    assert [r.rank for r in stalled] == ["0", "5"]
    assert line.startswith("rank 5 on node-b stalled first (") and "41 s before any other rank" in line
    assert "1 other rank(s) still moving" in line and line.endswith(
        "its report: node-b:/r/20261202T0000Z-node-b-9-rank5"
    )
    assert "stalled" in render(rows, stalled, line) and "moving" in render(rows, stalled, line)


def test_nothing_stalled_says_so_and_a_down_sidecar_is_listed_not_dropped():
    rows = [_row("node-a", "0", 1000.0, 3.0), _row("node-b", "1", 990.0, 5.0, up=False)]
    stalled, line = first_stalled(rows, 60.0)
    assert stalled == [] and line is None
    text = render(rows, stalled, line)
    assert "sidecar down" in text and text.endswith("nothing stalled (2 rank(s))")
    late = [_row("node-b", "1", 990.0, 300.0, up=False)]
    assert first_stalled(late, 60.0)[1].endswith("its sidecar no longer answers")


def test_a_rank_is_stalled_by_its_own_sidecars_stall_timeout_unless_told_otherwise():
    rows = [_row("node-a", "0", 1000.0, 22.0, timeout=5.0), _row("node-b", "1", 1010.0, 22.0)]
    assert [r.rank for r in first_stalled(rows)[0]] == ["0"]  # node-b's sidecar served none: 60 s
    assert [r.rank for r in first_stalled(rows, 10.0)[0]] == ["0", "1"]


def test_a_report_of_an_earlier_run_on_the_same_node_is_not_this_runs():
    started = 1796187600.0  # 2026-12-02 05:00:00 UTC
    assert _of_this_run("/r/20261202T050003Z-vm-9-rank1", started)
    assert not _of_this_run("/r/20261202T045925Z-vm-14233", started)
    assert _of_this_run("/r/20261202T045925Z-vm-14233", None) and _of_this_run("/r/odd-name", started)


def test_a_bad_prometheus_url_is_one_line_naming_it_without_its_password():
    import pytest

    from watchdog.commands.cluster import ClusterError, _shown, query

    assert _shown("http://alice:s3cret@prom:9090/") == "http://alice:…@prom:9090/"
    for url in ("ftp://prom", "prom:9090", "http://"):
        with pytest.raises(ClusterError, match="not an http:// or https:// URL"):
            query(url, "up")
    with pytest.raises(ClusterError) as e:
        query("http://alice:s3cret@127.0.0.1:1", "up", timeout_s=2)
    assert "s3cret" not in str(e.value) and "cannot be reached" in str(e.value)


def test_a_run_id_may_hold_what_torchrun_rdzv_ids_hold_but_nothing_that_breaks_the_query():
    import pytest

    from watchdog.collect.discovery import RUN_ID_VALUE
    from watchdog.commands.cluster import ClusterError, collect

    for run_id in ("job42", "slurm-1234.0", "alice@node-a", "team/exp-7", "a+b=c"):
        assert RUN_ID_VALUE.match(run_id), run_id
        with pytest.raises(ClusterError, match="cannot be reached"):  # accepted: the query was tried
            collect("http://127.0.0.1:1", run_id)
    for run_id in ('a"}or{x="', "a\\b", "two words", "", "x" * 129):
        with pytest.raises(ClusterError, match="not a run id"):
            collect("http://127.0.0.1:1", run_id)


# --- against a hostile or broken "Prometheus": real HTTP servers on loopback ports -------------

import argparse  # noqa: E402
import contextlib  # noqa: E402
import http.server  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import urllib.parse  # noqa: E402

import pytest  # noqa: E402

from watchdog.commands import cluster  # noqa: E402


def _vector(series):
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": series}}).encode()


def _series(node, rank, value, **labels):
    metric = {"node": node, "rank": rank, "run_id": "job42", "instance": f"{node}:9400", **labels}
    return {"metric": metric, "value": [1000.0, str(value)]}


def _healthy(expr):
    """Two ranks, one stalled (its last progress 500 s ago), as the real queries ask."""
    if "last_progress_timestamp" in expr:
        return _vector([_series("node-a", "0", 500.0), _series("node-b", "1", 990.0)])
    if "since_progress" in expr and not expr.startswith("up"):
        return _vector([_series("node-a", "0", 500.0), _series("node-b", "1", 10.0)])
    if expr.startswith("up"):
        return _vector([_series("node-a", "0", 1), _series("node-b", "1", 1)])
    return _vector([])


@contextlib.contextmanager
def _server(respond):
    """An HTTP server on a loopback port; ``respond(handler)`` writes each answer. Yields
    (base URL, the requests seen: (path, headers) pairs)."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            seen.append((self.path, dict(self.headers)))
            try:
                respond(self)
            except OSError:
                pass

        def log_message(self, *_a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _answer_with(answer):
    def respond(h):
        expr = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query).get("query", [""])[0]
        body = answer(expr)
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return respond


def _cmd(url, capsys, timeout=30.0, json_out=False):
    args = argparse.Namespace(prometheus=url, run_id=None, stalled_after=60.0, json=json_out, timeout=timeout)
    code = cluster.cmd_cluster(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_basic_auth_never_reaches_the_other_origin_a_redirect_names(capsys):
    with _server(_answer_with(_healthy)) as (other, other_seen):

        def redirect(h):
            h.send_response(302)
            h.send_header("Location", other + h.path)
            h.send_header("Content-Length", "0")
            h.end_headers()

        with _server(redirect) as (first, first_seen):
            host_port = first.split("//", 1)[1]
            code, out, err = _cmd(f"http://alice:s3cret@{host_port}", capsys)
    assert first_seen and first_seen[0][1].get("Authorization", "").startswith("Basic ")
    assert not any("Authorization" in headers for _path, headers in other_seen), other_seen
    assert code == 2 and out == "" and err.count("\n") == 1 and "another origin" in err, err
    assert "s3cret" not in err


def test_a_redirect_within_the_same_origin_keeps_its_credentials(capsys):
    def respond(h):
        if not h.path.startswith("/prom/"):
            h.send_response(301)
            h.send_header("Location", "/prom" + h.path)
            h.send_header("Content-Length", "0")
            h.end_headers()
        elif h.headers.get("Authorization", "").startswith("Basic "):
            _answer_with(_healthy)(h)
        else:
            h.send_error(401)

    with _server(respond) as (url, _seen):
        code, out, err = _cmd(url.replace("//", "//alice:s3cret@"), capsys)
    assert code == 1 and "rank 0 on node-a stalled first" in out, (out, err)


def _drip(h, in_headers):
    """One byte every 0.5 s, for 20 s at most (the old code's per-read timeout never fired)."""
    body = _healthy("last_progress_timestamp")
    if not in_headers:
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.flush()
    data = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200 if in_headers else body
    end = time.monotonic() + 20
    for byte in data:
        if time.monotonic() > end:
            return
        h.wfile.write(bytes([byte]))
        h.wfile.flush()
        time.sleep(0.5)


@pytest.mark.parametrize("in_headers", [False, True], ids=["body", "headers"])
def test_a_server_dripping_bytes_is_cut_off_at_the_commands_deadline(capsys, in_headers):
    with _server(lambda h: _drip(h, in_headers)) as (url, _seen):
        began = time.monotonic()
        code, out, err = _cmd(url, capsys, timeout=2.0)
        took = time.monotonic() - began
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert url in err and "within" in err and took < 2.0 + 8.0, (took, err)


def test_more_series_than_the_cap_is_one_line_not_a_minute_and_a_gigabyte(capsys):
    many = [{"metric": {"node": "n", "rank": str(i)}, "value": [1.0, "1"]} for i in range(120_000)]
    body = _vector(many)
    assert len(body) < 16 << 20  # under the old cap: it was taken whole
    with _server(_answer_with(lambda _expr: body)) as (url, _seen):
        began = time.monotonic()
        code, out, err = _cmd(url, capsys)
        took = time.monotonic() - began
    assert code == 2 and out == "" and err.count("\n") == 1 and "--run-id" in err, err
    assert took < 20, took


FORGED = "node-z  7  7  moving"


def test_label_values_reach_the_terminal_escaped_and_cannot_forge_a_line(capsys):
    evil_node = f"node-a\n{FORGED}\x1b]0;owned\x07\x1b[2J"

    def answer(expr):
        text = _healthy(expr).decode().replace('"node-a"', json.dumps(evil_node))
        return text.replace('"rank": "1"', '"rank": "1\\r\\u009b31m"').encode()

    with _server(_answer_with(answer)) as (url, _seen):
        code, out, err = _cmd(url, capsys)
    assert code == 1, err
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\x9b" not in out, out
    assert not any(line.startswith(FORGED) for line in out.splitlines()), out
    assert len(out.splitlines()) == 2 + 2 + 1  # header, rule, two ranks, the verdict
    assert "\\n" + FORGED in out and "stalled first" in out.splitlines()[-1]


@pytest.mark.parametrize(
    "series",
    [
        [{"metric": [], "value": [1.0, "1"]}],
        [{"value": [1.0, "1"]}],
        [{"metric": {"node": "a", "rank": 1}, "value": [1.0, "1"]}],
        [{"metric": {"node": "a"}, "value": "x"}],
        "not a list",
    ],
    ids=["metric-list", "no-metric", "label-not-a-string", "value-not-a-pair", "result-not-a-list"],
)
def test_a_malformed_answer_is_one_line_exit_2_not_a_traceback(capsys, series):
    with _server(_answer_with(lambda _expr: _vector(series))) as (url, _seen):
        code, out, err = _cmd(url, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "not as Prometheus's HTTP API" in err, err


def test_odd_but_well_formed_values_are_shown_not_a_traceback(capsys):
    def answer(expr):
        if "last_progress_timestamp" in expr:  # a date no calendar has, and a rank of "²"
            return _vector([_series("node-a", "²", -1e20), _series("node-b", "1", "NaN")])
        return _healthy(expr).replace(b'"rank": "0"', b'"rank": "\\u00b2"')

    with _server(_answer_with(answer)) as (url, _seen):
        code, out, err = _cmd(url, capsys)
    assert code in (0, 1) and err == "", err
    assert "node-a" in out and "node-b" in out


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://[::1", "http://alice:pw@[::1:9090/"])
def test_a_url_that_is_not_one_is_one_line_exit_2(capsys, url):
    code, out, err = _cmd(url, capsys, timeout=5.0)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--prometheus" in err, err
    assert ":pw@" not in err


# --- by cause before time (issue #37 section 2): a real HTTP server answering as Prometheus ------


def _prometheus(ranks, agents=()):
    """Answers to ``collect``'s queries for ``ranks`` (dicts: node, rank, local, last (Unix s),
    and optionally waiting (0/1), report (mode, kind)) and launchers' rows on ``agents`` (node,
    last): rank-less rows served only before the ranks existed, as a sidecar does."""

    def labels(r):
        return {"node": r["node"], "rank": r["rank"], "local_rank": r.get("local", ""), "instance": f"{r['node']}:9400"}

    def answer(expr):
        rows = list(ranks) + [{"node": node, "rank": "", "last": last} for node, last in agents]
        if expr.startswith("up"):
            return _vector(
                [{"metric": {"instance": f"{n}:9400"}, "value": [0, "1"]} for n in {r["node"] for r in rows}]
            )
        if "last_progress_timestamp" in expr:
            return _vector([{"metric": labels(r), "value": [0, str(r["last"])]} for r in rows])
        if "seconds_since_progress" in expr:
            return _vector([{"metric": labels(r), "value": [0, "0"]} for r in rows])  # as last scraped
        if "batches_delivered" in expr or "data_wait" in expr:  # a launcher has no loader series
            return _vector([{"metric": labels(r), "value": [0, "8"]} for r in ranks])
        if "stall_timeout" in expr:
            return _vector([{"metric": labels(r), "value": [0, "5"]} for r in rows])
        if "waiting_for_batch" in expr:
            return _vector([{"metric": labels(r), "value": [0, str(r["waiting"])]} for r in ranks if "waiting" in r])
        if "report_info" in expr:
            out = []
            for r in ranks:
                if "report" in r:
                    mode, kind = r["report"]
                    folder = f"/r/20261202T050003Z-{r['node']}-9-rank{r['rank']}"
                    out.append(
                        {"metric": {**labels(r), "mode": mode, "kind": kind, "folder": folder}, "value": [0, "1"]}
                    )
            return _vector(out)
        return _vector([])

    return answer


def _json_cmd(url, capsys):
    code, out, err = _cmd(url, capsys, json_out=True)
    return code, json.loads(out) if out.strip() else None, err


def _two_nodes_stalled_within_a_second(t):
    """Issue #37's job: c10d gave node n0 (--node-rank 0) ranks 2 and 3, n1 ranks 0 and 1; rank 3's
    loader stalled, the others then wait in the all-reduce; every last progress within 1 s, rank
    3's not the earliest."""
    return [
        dict(node="n1", rank="0", local="0", last=t + 0.1, waiting=0, report=("hang", "stall_outside_loader")),
        dict(node="n1", rank="1", local="1", last=t + 0.2, waiting=0, report=("hang", "stall_outside_loader")),
        dict(node="n0", rank="2", local="0", last=t + 0.3, waiting=0),
        dict(node="n0", rank="3", local="1", last=t + 0.6, waiting=1, report=("hang", "worker_stuck")),
    ]


def test_the_rank_whose_loader_stalled_is_first_by_cause_and_a_launchers_row_never(capsys):
    t = time.time() - 120
    ranks = _two_nodes_stalled_within_a_second(t)
    with _server(_answer_with(_prometheus(ranks, agents=[("n0", t - 30), ("n1", t - 29)]))) as (url, _seen):
        code, doc, err = _json_cmd(url, capsys)
        table_code, table, _err = _cmd(url, capsys)
    assert code == 1 and table_code == 1, err
    verdict = doc["verdict"]
    assert verdict.startswith("rank 3 on n0 stalled first by cause ("), verdict  # the old code: "the job on n0"
    assert "the others within 3 s" in verdict and "its DataLoader hang was reported (worker_stuck)" in verdict
    assert "ranks 0, 1 on n1, rank 2 on n0 wait outside their DataLoader" in verdict, verdict
    assert verdict.endswith("its report: n0:/r/20261202T050003Z-n0-9-rank3"), verdict
    assert doc["first"] == {"node": "n0", "rank": "3"} and doc["tied"] == []
    assert sorted(r["rank"] for r in doc["stalled"]) == ["0", "1", "2", "3"]  # no launcher's row among them
    agents = [r for r in doc["ranks"] if r["agent"]]
    assert [(r["node"], r["rank"]) for r in agents] == [("n0", ""), ("n1", "")]
    causes = {r["rank"]: r["cause"] for r in doc["ranks"] if not r["agent"]}
    assert causes == {"0": "outside loader", "1": "outside loader", "2": "outside loader", "3": "loader stalled"}
    lines = table.splitlines()
    assert lines[-1] == verdict and not lines[-1].startswith("the job")
    row3 = next(line.split() for line in lines if line.startswith("n0") and line.split()[1] == "3")
    assert row3[:6] == ["n0", "3", "1", "stalled", "loader", "stalled"], row3  # its node, local rank, cause
    assert sum(1 for line in lines if line.split()[3:4] == ["agent"]) == 2, table


def test_main_waiting_in_next_decides_before_any_report_and_a_crash_is_a_cause():
    t = 1796187600.0
    ranks = [
        RankRow("n1", "0", "0", "j", "n1:9400", True, t, 100.0, 8.0, 1.0, 5.0, waiting_for_batch=False),
        RankRow("n0", "3", "1", "j", "n0:9400", True, t + 0.5, 99.5, 8.0, 1.0, 5.0, waiting_for_batch=True),
    ]
    verdict = judge(ranks)
    assert verdict.first is ranks[1] and "main waits in its DataLoader's __next__" in verdict.line, verdict.line
    assert "rank 0 on n1 wait outside their DataLoader" in verdict.line
    crashed = RankRow(
        "n1", "1", "1", "j", "n1:9400", True, t + 40, 60.0, 8.0, 1.0, 5.0, last_mode="crash", last_kind="x"
    )
    verdict = judge([ranks[0], crashed])
    assert verdict.first is crashed and "stalled first by cause" in verdict.line and "it crashed (x)" in verdict.line
    assert "40 s after rank 0 on n1" in verdict.line, verdict.line  # first by cause, not by time: said


def test_ranks_that_no_cause_tells_apart_within_a_second_are_a_tie(capsys):
    t = time.time() - 120
    both = [
        dict(node="n0", rank="1", local="1", last=t + 0.4, waiting=1),
        dict(node="n1", rank="2", local="0", last=t, waiting=1, report=("hang", "worker_blocked_io")),
        dict(node="n1", rank="3", local="1", last=t + 0.2, waiting=0),
    ]
    with _server(_answer_with(_prometheus(both))) as (url, _seen):
        code, doc, err = _json_cmd(url, capsys)
    assert code == 1, err
    assert doc["first"] is None and doc["tied"] == [{"node": "n1", "rank": "2"}, {"node": "n0", "rank": "1"}]
    assert doc["verdict"].startswith("a tie: rank 2 on n1, rank 1 on n0 stopped within 3 s of each other"), doc
    assert "each with its DataLoader stalled" in doc["verdict"] and "then rank 3 on n1" in doc["verdict"]
    outside = [RankRow("n0", str(i), str(i), "j", "n0:9400", True, 1000.0 + i / 4, 99.0, 1.0, 0.0, 5.0) for i in (0, 1)]
    verdict = judge([replace(r, waiting_for_batch=False) for r in outside])
    assert verdict.first is None and verdict.line.startswith("a tie: ranks 0, 1 on n0 stopped within 3 s")
    assert "each waiting outside its DataLoader" in verdict.line
    jobs = judge([replace(r, rank="", node=f"n{r.local_rank}", instance=f"n{r.local_rank}:9400") for r in outside])
    assert jobs.line.startswith("a tie: the job on n0, the job on n1 stopped within 3 s"), jobs.line
    apart = judge([outside[0], replace(outside[1], last_progress=1004.0)])  # 4 s apart: time decides
    assert apart.first is outside[0] and "4 s before any other rank" in apart.line


def test_a_launchers_stale_row_alone_is_nothing_stalled(capsys):
    now = time.time()
    moving = [dict(node="n0", rank=str(i), local=str(i), last=now - 1, waiting=0) for i in (0, 1)]
    with _server(_answer_with(_prometheus(moving, agents=[("n0", now - 3600)]))) as (url, _seen):
        code, out, err = _cmd(url, capsys)
    assert code == 0, (out, err)  # the old code: "the job on n0 stalled first", exit 1
    assert out.splitlines()[-1] == "nothing stalled (2 rank(s))" and " agent " in out


def test_a_rankless_row_is_a_launchers_only_beside_ranks_of_its_sidecar():
    """A single-process job's row (no rank, its sidecar serves nothing else) is the job's: a
    candidate, named "the job on NODE"."""
    with _server(_answer_with(_prometheus([], agents=[("n0", time.time() - 300)]))) as (url, _seen):
        rows = cluster.collect(url)
    assert [(r.rank, r.agent) for r in rows] == [("", False)]
    assert judge(rows).line.startswith("the job on n0 stalled first")


def test_the_endpoint_says_whether_main_waits_in_next_for_a_workers_batch():
    """``dlwatch_loader_waiting_for_batch``: 1 waiting for worker 1's batch, 0 outside ``__next__``,
    absent in ``__next__`` for no worker's batch (an epoch's end leaves ``waiting_since`` set)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from tests.unit.builders import MAIN_PID, proc, sample
    from tests.unit.test_verify import loader_view
    from watchdog.types import ROLE_MAIN, Frame, WatcherStatus
    from watchdog.watch.metrics import JobMetrics

    def served(waiting_since, worker):
        view = replace(loader_view(MAIN_PID, 1, 5), site=Frame("main", "/job/train.py", 12, False))
        view = replace(view, waiting_since=waiting_since, waiting_worker=worker)
        smp = replace(sample(30.0, [proc(MAIN_PID, ROLE_MAIN, [])]), loaders=(view,))
        registry = CollectorRegistry()
        registry.register(JobMetrics(lambda: [WatcherStatus(rank="3", root_pid=MAIN_PID, sample=smp, stall_s=9.0)]))
        return [
            (s.labels["loader"], s.value)
            for f in text_string_to_metric_families(generate_latest(registry).decode())
            for s in f.samples
            if s.name == "dlwatch_loader_waiting_for_batch"
        ]

    assert served(20.0, 1) == [("train.py:12", 1.0)]
    assert served(None, -1) == [("train.py:12", 0.0)]
    assert served(20.0, -1) == []
