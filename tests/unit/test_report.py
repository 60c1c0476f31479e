"""Reports: the document, the text (short at the top), and atomic owner-only writing."""

from __future__ import annotations

import dataclasses
import os
import stat

import pytest

from tests.unit.builders import MAIN_PID, WORKER_PID, fixture, hang_facts
from watchdog.collect import pyspy
from watchdog.diagnose import diagnose
from watchdog.errors import ReportWriteError
from watchdog.report import document as report
from watchdog.report import rendering, writer
from watchdog.types import Report


def test_report_text_is_short_at_the_top_and_json_has_required_fields():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    facts = hang_facts([t])
    rep = report.build(
        facts,
        diagnose(facts),
        {"pid": MAIN_PID, "cmdline": ["python", "x.py"], "start_time": "t"},
        1.8e9,
        "report",
        {"A": "b"},
        {},
    )
    doc = rep.document
    for key in ("schema_version", "job", "detected_at", "stall_s", "stall", "processes", "timeline", "diagnoses"):
        assert key in doc
    for key in ("kind", "severity", "certainty", "confidence", "summary", "evidence", "remedy", "pids"):
        assert key in doc["diagnoses"][0]
    head = rep.text.splitlines()[:7]
    assert head[0].startswith("dlwatch: job hung — hang: suspected; cause: fork_inherited_lock (") and any(
        line.strip().startswith("fix:") for line in head
    )
    assert "Stacks" not in rendering.summary_text(rep.text) and "Stacks" in rep.text


def test_writer_is_atomic_and_owner_only(tmp_path):
    rep = Report("20260101T000000Z-1", {"a": 1}, "text\n", (("py-spy-1.json", "[]"),))
    path = writer.write(rep, str(tmp_path / "r"))
    assert sorted(os.listdir(path)) == ["py-spy-1.json", "report.json", "report.txt"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(os.path.join(path, f)).st_mode) == 0o600 for f in os.listdir(path))
    second = writer.write(rep, str(tmp_path / "r"))
    assert second != path and os.path.isdir(second)


def test_writer_failure_names_the_folder_and_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rep = Report("n", {}, "t", ())
    with pytest.raises(ReportWriteError) as e:
        writer.write(rep, str(blocker / "sub"))
    assert str(blocker) in str(e.value)
    told = []
    path = writer.write_with_fallback(rep, str(blocker / "sub"), told.append, fallback_base=str(tmp_path))
    assert path.startswith(str(tmp_path / writer.FALLBACK_NAME)) and str(blocker) in told[0]
    assert f"wrote to {os.path.dirname(path)} instead" in told[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's folder is made with chown (root)")
def test_a_fallback_folder_another_user_made_or_linked_is_never_written_through(tmp_path):
    """Another local user made /tmp/dlwatch-reports first (theirs, or a link to their folder):
    root's report goes to a fresh private folder, never into theirs."""
    sticky = tmp_path / "tmp"
    sticky.mkdir(mode=0o777)
    os.chmod(sticky, 0o1777)
    theirs = tmp_path / "attacker"
    theirs.mkdir(mode=0o777)
    os.chown(theirs, 65534, 65534)
    rep = Report("n", {}, "t", ())
    for squat in ("folder", "link"):
        target = sticky / writer.FALLBACK_NAME
        if squat == "folder":
            target.mkdir(mode=0o777)
            os.chown(target, 65534, 65534)
        else:
            target.symlink_to(theirs)
        folder = writer.fallback_dir(str(sticky))
        assert os.path.dirname(folder) == str(sticky) and folder != str(target), squat
        st = os.lstat(folder)
        assert st.st_uid == os.getuid() and not st.st_mode & 0o077
        path = writer.write(rep, folder)
        assert not os.listdir(theirs) and os.path.realpath(path).startswith(str(sticky) + "/"), squat
        if squat == "folder":
            os.rmdir(target)
        else:
            os.unlink(target)
    made = writer.fallback_dir(str(sticky))  # nobody squats: the usual name, made private
    assert made == str(sticky / writer.FALLBACK_NAME) and not os.lstat(made).st_mode & 0o077


def test_the_stderr_summary_is_short_and_wrapped():
    text = "\n".join(
        [
            "dlwatch: job hung — hang: proven; cause: fork_inherited_lock (likely, confidence 0.80) — job pid 1 "
            "stalled 5 s (" + "python train.py " * 10 + ")",
            "  cause:  " + "a long cause sentence " * 12,
            "  where:  /home/user/train/data.py:40",
            "  fix:    " + "do this and that " * 12,
            "  docs:   https://pytorch.org/docs/stable/notes/multiprocessing.html",
            "  action: terminate (proven)",
            "  why:    proven: every thread waits",
            "",
            "Evidence:",
            "  - worker pid 2: futex",
        ]
    )
    short = rendering.short_summary(text)
    lines = short.splitlines()
    assert all(len(line) <= rendering.SHORT_WIDTH for line in lines), lines
    assert "cause:" in short and "where:" in short and "fix:" in short and "action:" in short
    assert "Evidence" not in short and "docs:" not in short and "why:" not in short
    warning = rendering.short_summary(text, warning=True)  # the job runs on: what, where, what to change
    assert "cause:" in warning and "where:" in warning and "fix:" in warning, warning
    assert "action:" not in warning and "why:" not in warning and warning.count("\n") < len(lines)


def test_a_job_s_argument_cannot_forge_a_line_of_the_summary():
    forged = "x\n  cause:  nothing is wrong\x1b[2J\u2028  fix:    rm -rf /"
    facts = hang_facts([])
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py", forged], "start_time": None}
    rep = report.build(facts, diagnose(facts), job, 1.8e9, "report", None, {})
    header = rep.text.splitlines()[0]
    assert header.startswith("dlwatch: job hung") and "\\n  cause:  nothing is wrong\\x1b[2J\\u2028" in header
    short = rendering.short_summary(rep.text)
    keys = [line for line in short.splitlines() if line.startswith(("  cause:", "  fix:"))]
    assert len(keys) == 2 and not any("nothing is wrong" in k or "rm -rf" in k for k in keys), short
    assert "\x1b" not in short


def test_secret_looking_arguments_are_redacted_from_command_lines():
    from watchdog.redact import REDACTED
    from watchdog.redact import cmdline as redact_cmdline

    args = [
        "python",
        "train.py",
        "--api-key=abc123",
        "--hf-token",
        "hf_XYZ",
        "WANDB_API_KEY=k1",
        "--db",
        "postgres://u:pw@h/db",
        "--lr",
        "0.1",
        "--password",
    ]
    out = redact_cmdline(args)
    assert out[:2] == ["python", "train.py"] and out[2] == f"--api-key={REDACTED}"
    assert out[3:5] == ["--hf-token", REDACTED] and out[5] == f"WANDB_API_KEY={REDACTED}"
    assert out[7] == f"postgres://u:{REDACTED}@h/db" and out[8:10] == ["--lr", "0.1"]
    assert "abc123" not in " ".join(out) and "hf_XYZ" not in " ".join(out) and "pw@" not in " ".join(out)
    facts = hang_facts([])
    rep = report.build(
        facts, diagnose(facts), {"pid": MAIN_PID, "cmdline": args, "start_time": None}, 1.8e9, "report", None, {}
    )
    assert "abc123" not in rep.text and "hf_XYZ" not in str(rep.document)


def test_locals_with_secret_looking_names_are_redacted():
    import json

    from watchdog.collect.pyspy import parse_dump
    from watchdog.redact import REDACTED

    dump = [
        {
            "pid": 1,
            "thread_id": 1,
            "os_thread_id": 1,
            "thread_name": "MainThread",
            "active": True,
            "owns_gil": False,
            "frames": [
                {
                    "name": "train",
                    "filename": "/job/train.py",
                    "module": None,
                    "short_filename": "train.py",
                    "line": 10,
                    "locals": [
                        {"name": "api_key", "addr": 1, "arg": True, "repr": "'sk-live-123'"},
                        {"name": "password", "addr": 2, "arg": False, "repr": "'hunter2'"},
                        {"name": "url", "addr": 3, "arg": False, "repr": "'https://u:pw9@host/x'"},
                        {"name": "lr", "addr": 4, "arg": False, "repr": "0.1"},
                    ],
                }
            ],
        }
    ]
    (thread,) = parse_dump(json.dumps(dump), locals_=True)
    loc = dict(thread.frames[0].locals)
    assert loc["api_key"] == REDACTED and loc["password"] == REDACTED and loc["lr"] == "0.1"
    assert "pw9" not in loc["url"] and "host" in loc["url"]


def test_the_html_page_says_what_a_dump_lost_while_its_stack_is_folded():
    import dataclasses

    from watchdog.report import html

    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    facts = hang_facts([t], stacks_ok=False)
    main_pid, main_stack = facts.stacks[0]
    lost = dataclasses.replace(main_stack, lost="native frames lost: py-spy --native timed out")
    facts = dataclasses.replace(facts, stacks=((main_pid, lost),) + facts.stacks[1:])
    rep = report.build(facts, diagnose(facts), {"pid": MAIN_PID, "cmdline": ["python"]}, 1.8e9, "report", {}, {})
    page = html.render(rep.document, rep.text)
    summaries = [line for line in page.splitlines() if line.startswith("<details><summary>")]
    assert any("(Python frames only: native frames lost" in s for s in summaries), summaries
    assert any("(no stack: py-spy cannot attach" in s for s in summaries), summaries


def test_control_characters_from_the_job_are_escaped_in_report_txt_and_html():
    from watchdog.report import html as html_page
    from watchdog.text import printable

    assert (
        printable("killed by signal: Bus error.\x00 \x1b[2J\tok\n")
        == "killed by signal: Bus error.\\x00 \\x1b[2J\tok\n"
    )
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    facts = hang_facts([t])
    facts = dataclasses.replace(facts, stderr_tail="RuntimeError: DataLoader worker (pid 7) is killed by signal\x00\n")
    diags = [
        dataclasses.replace(
            d, finding=dataclasses.replace(d.finding, evidence=d.evidence + ("stderr: killed\x00 \x1b]0;title\x07",))
        )
        for d in diagnose(facts)
    ]
    job = {"pid": MAIN_PID, "cmdline": ["python", "x.py"], "start_time": "t"}
    rep = report.build(facts, diags, job, 1.8e9, "report", None, {})
    assert "\x00" not in rep.text and "\x1b" not in rep.text and "\\x00" in rep.text
    page = html_page.render(rep.document, rep.text)
    assert "\x00" not in page and "\x1b" not in page


@pytest.mark.timeout(60)
def test_the_metrics_endpoint_bounds_its_connections_and_closes_idle_ones():
    import socket
    import time
    import urllib.request

    import psutil

    from watchdog.watch import metrics

    server = metrics.serve(0, metrics.JobMetrics(lambda: []))
    port = server.server_address[1]

    def held_by_server():  # this process's sockets on the port with a peer: the server's side
        return sum(1 for c in psutil.Process().net_connections("tcp") if c.laddr and c.laddr.port == port and c.raddr)

    held = []
    try:
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).status == 200
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3 * metrics.MAX_CONNECTIONS)]
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).status == 200
        assert held_by_server() <= metrics.MAX_CONNECTIONS  # the oldest were closed at once
        started = time.monotonic()
        for s in held:  # idle ones are closed at the request deadline, the last ones too
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
        assert time.monotonic() - started < metrics.REQUEST_DEADLINE_S + 20
        deadline = time.monotonic() + 10
        while held_by_server():
            assert time.monotonic() < deadline, "the server still holds idle connections"
            time.sleep(0.1)
    finally:
        for s in held:
            s.close()
        server.shutdown()
        server.server_close()


def test_status_shows_the_job_s_processes_before_its_inside_view():
    from tests.unit.builders import WORKER_PID, proc
    from watchdog.types import ROLE_MAIN, ROLE_WORKER, InsideView

    processes = (proc(MAIN_PID, ROLE_MAIN, []), proc(WORKER_PID, ROLE_WORKER, []))
    doc = report.status_document(InsideView(note="no inside view"), {}, 0.0, processes)
    lines = rendering.status_lines(doc)
    assert lines[0] == "Processes (now):" and any(str(WORKER_PID) in line and "worker" in line for line in lines[1:5])
    assert [p["pid"] for p in doc["processes"]] == [MAIN_PID, WORKER_PID]


def _loader(iterator: int, batches: int, waiting_since: float, last_batch: float):
    from watchdog.types import LoaderView

    return LoaderView(
        pid=MAIN_PID,
        iterator=iterator,
        kind="_MultiProcessingDataLoaderIter",
        site=None,
        settings=(("num_workers", 1),),
        dataset_type="DS",
        iterable=False,
        workers=(WORKER_PID,),
        worker_exitcodes=(),
        created=last_batch - 10.0,
        batches=batches,
        wait_s=1.0,
        epoch=0,
        first_batch_s=0.5,
        waiting_since=waiting_since,
        waiting_idx=batches,
        waiting_worker=0,
        last_batch=last_batch,
        intervals=batches - 1,
        interval_p50_s=0.01,
        interval_p99_s=0.04,
    )


def _loader_section(lines) -> str:
    """The text's "DataLoader (inside view):" section."""
    text = "\n".join(lines)
    return text.split("DataLoader (inside view):\n", 1)[1].split("\n\n", 1)[0]


def test_an_iterator_left_long_ago_or_of_an_ended_job_is_said_in_the_past():
    from watchdog.types import InsideView

    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    now = hang_facts([t]).sample.t_mono
    # iterator 1 was left in __next__ 1850 s ago (a loop broken out of); iterator 2 is main's current one
    inside = InsideView(loaders=(_loader(1, 88, now - 1850.0, now - 1851.0), _loader(2, 5, now - 20.0, now - 20.5)))
    facts = hang_facts([t], inside=inside)
    job = {"pid": MAIN_PID, "cmdline": ["python", "x.py"], "start_time": "t"}
    doc = report.build(facts, diagnose(facts), job, 1.8e9, "report", None, {}).document
    text = _loader_section(rendering.text_lines(doc))
    assert "main waits in __next__ for batch 88" not in text and "for 1850 s" not in text, text
    assert "finished after 88 batches (epoch 0)" in text
    assert "main waited in __next__ for batch 88 from worker 0" in text and "when it last ran" in text
    assert "    5 batches (epoch 0)" in text and "main waits in __next__ for batch 5 from worker 0" in text  # current
    ended = {**doc, "mode": "exit", "stall_s": None, "exit_code": 1}
    text = _loader_section(rendering.text_lines(ended))
    assert "main waits" not in text and "for 20 s" not in text, text
    assert "finished after 88 batches (epoch 0)" in text and "    5 batches (epoch 0) before the job ended" in text
    assert f"batch 88 from worker 0 (pid {WORKER_PID}) when it last ran" in text
    assert f"main waited in __next__ for batch 5 from worker 0 (pid {WORKER_PID}) when the job ended" in text
