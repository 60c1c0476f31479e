"""Parse-only and pure-logic tests on captured fixtures and hand-built records, beside the
end-to-end tests in test_sidecar.py (which run the real thing)."""

from __future__ import annotations

import os
import stat

import pytest
import yaml

from watchdog import config, detect, frames, report, writer
from watchdog.collect import procfs, pyspy
from watchdog.diagnose import diagnose
from watchdog.errors import ConfigError, ReportWriteError
from watchdog.types import (
    ROLE_MAIN,
    ROLE_WORKER,
    Facts,
    Frame,
    HangVerdict,
    HostSample,
    ProcessSample,
    ProcessStack,
    Report,
    Sample,
    Stall,
    ThreadDetail,
    ThreadSample,
    ThreadStack,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MAIN_PID, WORKER_PID = 2842, 2847


def fixture(name: str) -> str:
    with open(os.path.join(HERE, "fixtures", name), encoding="utf-8") as f:
        return f.read()


# --- config -----------------------------------------------------------------------------------


def test_config_yaml_holds_every_default_with_a_comment():
    with open(os.path.join(ROOT, "config.yaml"), encoding="utf-8") as f:
        text = f.read()
    assert yaml.safe_load(text) == config.defaults_as_dict()
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and not line.rstrip().endswith(":"):
            assert "#" in line, f"setting without a comment: {line}"


@pytest.mark.parametrize(
    "data, key",
    [
        ({"x": 1}, "x"),
        ({"py_spy": {"nativ": True}}, "py_spy.nativ"),
        ({"stall_timeout_s": 0}, "stall_timeout_s"),
        ({"interval_s": True}, "interval_s"),
    ],
)
def test_config_errors_name_the_key(data, key):  # noqa: D103
    with pytest.raises(ConfigError) as e:
        config.validate(data, "f.yaml")
    assert e.value.key == key and "f.yaml" in str(e.value)


# --- py-spy output --------------------------------------------------------------------------------


def test_parse_worker_dump_marks_native_frames_and_keeps_order():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    assert t.tid == WORKER_PID and t.name == "MainThread" and not t.active
    assert t.frames[0].native and not t.frames[4].native
    assert frames.native_lock_frame(t).function == "PyThread_acquire_lock_timed"
    assert frames.innermost_user(t).function == "FileDataset.__getitem__"
    assert frames.is_worker_stack([t]) and not frames.is_idle_worker(t)


def test_parse_main_dump_finds_the_loader_wait_and_main_thread_first():
    threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    assert threads[0].tid == MAIN_PID
    assert frames.loader_wait_depth(threads[0]) is not None
    assert all(frames.loader_wait_depth(t) is None for t in threads[1:])
    assert sum(frames.is_feeder_thread(t) for t in threads) == 2


@pytest.mark.parametrize("text", ["", "{}", "not json"])
def test_parse_rejects_other_output(text):
    with pytest.raises(ValueError):
        pyspy.parse_dump(text)


def test_permission_failure_gives_the_ptrace_remedy():
    msg = pyspy.explain_failure("Error: Failed to get process executable name. Check that the process is running.\n", 42)
    assert "SYS_PTRACE" in msg and "ptrace_scope" in msg and "42" in msg


# --- /proc parsing -------------------------------------------------------------------------------


def test_parse_stat_with_parentheses_in_comm():
    line = "123 (a) b) c) S 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10"
    comm, state, cpu_s = procfs.parse_stat(line)
    assert comm == "a) b) c" and state == "S"
    assert cpu_s == pytest.approx(300 / procfs.CLK_TCK)


def test_secret_environment_values_are_redacted():
    env = procfs.redact_env(
        {
            "AWS_SECRET_ACCESS_KEY": "x",
            "HF_TOKEN": "y",
            "DB_PASSWORD": "z",
            "OMP_NUM_THREADS": "4",
            "DATABASE_URL": "postgres://u:pw123@h/db",
        }
    )
    assert env["OMP_NUM_THREADS"] == "4"
    assert env["DATABASE_URL"] == "postgres://u:<redacted>@h/db"
    assert {env[k] for k in ("AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "DB_PASSWORD")} == {procfs.REDACTED}


def test_wchan_families_cover_old_and_new_kernel_names():
    assert frames.wchan_family("futex_do_wait") == frames.wchan_family("futex_wait_queue_me") == "futex"
    assert frames.wchan_family("poll_schedule_timeout.constprop.0") == "poll"
    assert frames.wchan_family("0") is None


# --- detection ------------------------------------------------------------------------------------


def _thread(tid, cpu=0.0, vol=0, io=0):
    return ThreadSample(
        tid=tid, name="python", state="S", cpu_s=cpu, voluntary_ctxt_switches=vol, nonvoluntary_ctxt_switches=0, io_bytes=io
    )


def _proc(pid, role, threads, method=None):
    return ProcessSample(
        pid=pid,
        ppid=1,
        create_time=1.0,
        role=role,
        name="python",
        cmdline=("python",),
        status="S",
        wchan="futex_do_wait",
        cpu_s=0.0,
        rss_bytes=1,
        uss_bytes=None,
        pss_bytes=None,
        num_fds=3,
        rlimit_nofile_soft=1024,
        num_threads=len(threads),
        read_bytes=0,
        write_bytes=0,
        start_method=method,
        threads=tuple(threads),
    )


def _sample(t, procs):
    return Sample(t_mono=t, wall=1e9 + t, processes=tuple(procs), host=HostSample(None, None, 1 << 30))


def test_periodic_wakeups_and_busy_background_threads_are_not_progress():
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    for i in range(13):  # 12 s: main's main thread wakes every 5 s (3 switches), thread 11 burns CPU
        t = float(i)
        main = _proc(10, ROLE_MAIN, [_thread(10, vol=3 * (i // 5)), _thread(11, cpu=t)])
        worker = _proc(20, ROLE_WORKER, [_thread(20)], "fork")
        tracker.update(_sample(t, [main, worker]))
    stall = tracker.stall(_sample(12.0, [main, worker]))
    assert stall.stall_s == pytest.approx(12.0)
    assert dict(stall.progress_age_s)[20] == pytest.approx(12.0)


def test_io_cpu_and_new_workers_are_progress():
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    w = _proc(20, ROLE_WORKER, [_thread(20)], "fork")
    tracker.update(_sample(0.0, [_proc(10, ROLE_MAIN, [_thread(10)]), w]))
    tracker.update(_sample(5.0, [_proc(10, ROLE_MAIN, [_thread(10, io=4096)]), w]))
    assert tracker.stall(_sample(6.0, [_proc(10, ROLE_MAIN, [_thread(10, io=4096)]), w])).stall_s == pytest.approx(1.0)
    tracker.update(_sample(9.0, [_proc(10, ROLE_MAIN, [_thread(10, io=4096)]), w, _proc(21, ROLE_WORKER, [_thread(21)], "fork")]))
    assert tracker.stall(_sample(9.0, [_proc(10, ROLE_MAIN, [_thread(10, io=4096)])])).stall_s == 0.0
    tracker.update(_sample(12.0, [_proc(10, ROLE_MAIN, [_thread(10, io=4096)]), w, _proc(21, ROLE_WORKER, [_thread(21, cpu=0.2)], "fork")]))
    assert tracker.stall(_sample(12.0, [_proc(10, ROLE_MAIN, [])])).stall_s == 0.0


def test_confirm_without_stack_uses_proc_wait_state():
    details = (ThreadDetail(10, "python", "S", "poll_schedule_timeout.constprop.0", "7"),)
    v = detect.confirm(10, None, details, worker_count=2)
    assert v.kind == "dataloader" and not v.confirmed_by_stack
    assert detect.confirm(10, None, details, worker_count=0).kind == "outside_loader"


# --- diagnosis on fixtures ---------------------------------------------------------------------


def _facts(worker_threads, verdict_kind="dataloader", method="fork", sources=(), worker_details=None, stacks_ok=True):
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    main = _proc(MAIN_PID, ROLE_MAIN, [_thread(MAIN_PID)])
    worker = _proc(WORKER_PID, ROLE_WORKER, [_thread(WORKER_PID)], method)
    sample = _sample(30.0, [main, worker])
    stall = Stall(stall_s=20.0, quiet_since_mono=10.0, main_pid=MAIN_PID, progress_age_s=((MAIN_PID, 20.0), (WORKER_PID, 20.0)))
    verdict = HangVerdict(verdict_kind, True, "test", main_threads[0])
    stacks = [(MAIN_PID, ProcessStack(MAIN_PID, main_threads, True, None, "", 0.1))]
    if stacks_ok:
        stacks.append((WORKER_PID, ProcessStack(WORKER_PID, tuple(worker_threads), True, None, "", 0.1)))
    else:
        stacks.append((WORKER_PID, ProcessStack(WORKER_PID, (), True, "py-spy cannot attach (ptrace denied)", "", 0.1)))
    details = worker_details or (ThreadDetail(WORKER_PID, "pt_data_worker", "S", "futex_do_wait", "202"),)
    return Facts(
        mode="hang",
        sample=sample,
        timeline=(sample,),
        stall=stall,
        verdict=verdict,
        stacks=tuple(stacks),
        thread_details=((WORKER_PID, details),),
        main_threads_at_fork=((WORKER_PID, 3),),
        source_lines=tuple(sources),
    )


def _python_only(t: ThreadStack) -> ThreadStack:
    return ThreadStack(t.tid, t.name, t.active, t.owns_gil, tuple(f for f in t.frames if not f.native))


def test_native_lock_frames_give_fork_inherited_lock():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    first = diagnose(_facts([t]))[0]
    assert first.kind == "fork_inherited_lock" and first.confidence >= 0.9
    assert first.pids == (WORKER_PID,) and first.location.endswith("probes/train.py:102")


def test_python_only_stack_needs_the_source_line_to_call_it_a_lock():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    t = _python_only(t)
    top = frames.innermost_python(t)
    with_line = diagnose(_facts([t], sources=[((top.file, top.line), "with _SAMPLE_LOCK:")]))[0]
    assert with_line.kind == "fork_inherited_lock" and with_line.confidence < 0.9
    without = diagnose(_facts([t], sources=[((top.file, top.line), "return self._read(index)")]))[0]
    assert without.kind == "worker_stuck"


def test_spawned_worker_on_a_lock_is_not_an_inherited_lock():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    kinds = [d.kind for d in diagnose(_facts([t], method="spawn"))]
    assert "fork_inherited_lock" not in kinds


def test_idle_worker_is_healthy_and_main_waiting_is_only_a_symptom():
    idle = ThreadStack(
        WORKER_PID,
        "MainThread",
        False,
        False,
        (
            Frame("Connection._poll", "/usr/lib/python3.11/multiprocessing/connection.py", 440, False),
            Frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113, False),
            Frame("_worker_loop", "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", 330, False),
        ),
    )
    found = diagnose(_facts([idle], worker_details=(ThreadDetail(WORKER_PID, "pt_data_worker", "S", "poll_schedule_timeout", "7"),)))
    assert [d.kind for d in found] == ["unknown"]


def test_without_stacks_proc_facts_still_diagnose_with_lower_confidence():
    first = diagnose(_facts([], stacks_ok=False))[0]
    assert first.kind == "fork_inherited_lock" and first.confidence <= 0.55


def test_stall_outside_loader_names_mains_frame():
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    facts = _facts([], verdict_kind="outside_loader")
    first = diagnose(facts)[0]
    assert first.kind == "stall_outside_loader" and first.pids == (MAIN_PID,)
    assert main_threads[0].frames  # the verdict's thread is main's


# --- report and writer ------------------------------------------------------------------------


def test_report_text_is_short_at_the_top_and_json_has_required_fields():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    facts = _facts([t])
    rep = report.build(
        facts, diagnose(facts), {"pid": MAIN_PID, "cmdline": ["python", "x.py"], "start_time": "t"}, 1.8e9, "report", {"A": "b"}, {}
    )
    doc = rep.document
    for key in ("schema_version", "job", "detected_at", "stall_s", "processes", "timeline", "diagnoses"):
        assert key in doc
    for key in ("kind", "severity", "confidence", "summary", "evidence", "remedy", "pids"):
        assert key in doc["diagnoses"][0]
    head = rep.text.splitlines()[:6]
    assert head[0].startswith("dlwatch: hang fork_inherited_lock") and any(line.strip().startswith("fix:") for line in head)
    assert "Stacks" not in report.summary_text(rep.text) and "Stacks" in rep.text


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
    assert writer.write_with_fallback(rep, [str(blocker / "sub"), str(tmp_path / "ok")]).startswith(str(tmp_path / "ok"))


def test_yaml_reads_exponent_floats_and_keeps_ints(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("stall_timeout_s: 1e3\ntimeline_samples: 600\n")
    c = config.load(str(cfg), {})
    assert c.stall_timeout_s == 1000.0 and c.timeline_samples == 600


def test_non_utf8_config_is_a_config_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(b"\xff\xfe\x00garbage\x80")
    with pytest.raises(ConfigError) as e:
        config.load(str(cfg), {})
    assert "UTF-8" in str(e.value)


def test_stderr_tail_is_published_when_the_stream_pauses(tmp_path):
    import subprocess
    import sys
    import time

    from watchdog.collect.stderr_tail import StderrTail

    sink = open(tmp_path / "sink", "wb")
    tail = StderrTail(sink.fileno(), 1024)
    try:
        writer = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; sys.stderr.write('a' * 10 + 'LAST'); sys.stderr.flush(); time.sleep(3)"],
            stderr=tail.job_stderr,
        )
        tail.close_job_end()
        deadline = time.monotonic() + 2.5
        while "LAST" not in tail.text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tail.text().endswith("LAST")  # published while the writer is still alive
        writer.wait(10)
        tail.wait(5)
        assert (tmp_path / "sink").read_bytes() == b"a" * 10 + b"LAST"
    finally:
        sink.close()
