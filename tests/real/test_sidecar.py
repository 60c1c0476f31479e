"""End-to-end: real training jobs, real DataLoader deadlocks, real py-spy, under ``dlwatch``.

Every test that starts a hang is bounded (pytest-timeout, and ``communicate(timeout=…)``)
and kills every process group it started in ``finally``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import stat
import subprocess
import time
from typing import Optional

import psutil
import pytest

from tests.real.helpers import (
    DLWATCH,
    PY,
    ROOT,
    TERMINATE_AFTER_4_S,
    TRAIN,
    kill_tree,
    load_report,
    reports,
    run_bounded,
    start,
    wait_for,
    workers_started_t,
)
from tests.real.test_stopped_not_input_bound import JOB as STOPPED_JOB

STALL_S, INTERVAL_S = 5.0, 1.0


def _parse_iso(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run_dlwatch(args, job, timeout_s=120):
    return run_bounded(DLWATCH + ["run"] + args + ["--"] + job, timeout_s)


def _child(parent_pid: int, needle: str, timeout_s: float, what: str) -> psutil.Process:
    """The first child of ``parent_pid`` whose command line holds ``needle``, waited for. A
    child that still has the parent's own command line is a fork that has not exec'd yet (dlwatch
    starting py-spy, say: its command line holds the job's), not the job: skipped."""
    parent = psutil.Process(parent_pid)
    own = parent.cmdline()

    def found() -> Optional[psutil.Process]:
        for c in parent.children():
            try:
                cmd = c.cmdline()
            except psutil.Error:
                continue  # gone meanwhile
            if needle in " ".join(cmd) and cmd != own:
                return c
        return None

    return wait_for(found, timeout_s, what)


def test_healthy_job_exits_0_without_report(tmp_path):
    code, out, err = run_dlwatch(
        ["--stall-timeout", "5", "--report-dir", str(tmp_path)],
        TRAIN + ["--num-workers", "2", "--epochs", "3"],
    )
    assert code == 0, err
    assert "[train] done" in out
    assert reports(str(tmp_path)) == []


@pytest.mark.parametrize("busy_thread", [False, True], ids=["plain", "busy-background-thread"])
def test_fork_lock_is_found_reported_and_terminated(tmp_path, busy_thread):
    job = TRAIN + ["--fault", "fork-lock", "--num-workers", "2"] + (["--busy-thread"] if busy_thread else [])
    code, out, err = run_dlwatch(
        [
            "--stall-timeout",
            str(STALL_S),
            "--interval",
            str(INTERVAL_S),
            "--on-hang",
            "terminate",
            "--terminate-grace",
            "3",
            "--report-dir",
            str(tmp_path),
        ],
        job,
    )
    assert code == 124, err
    found = reports(str(tmp_path))
    assert len(found) == 1, found
    doc = load_report(found[0])
    first = doc["diagnoses"][0]
    assert first["kind"] == "fork_inherited_lock", first
    assert first["severity"] == "hang" and 0 < first["confidence"] <= 1
    assert first["location"].endswith("probes/train.py:" + str(_lock_line()))
    roles = {p["pid"]: p for p in doc["processes"]}
    workers = [p for p in roles.values() if p["role"] == "dataloader_worker"]
    assert len(workers) == 2
    assert set(first["pids"]) == {w["pid"] for w in workers}
    for p in workers + [roles[doc["job"]["pid"]]]:
        assert p["stack"]["threads"], p
    main = roles[doc["job"]["pid"]]
    assert any(f["name"].endswith("_try_get_data") for t in main["stack"]["threads"] for f in t["frames"])
    blocked_at = workers_started_t(out)
    assert blocked_at is not None, out
    detected = _parse_iso(doc["detected_at"])
    assert detected - blocked_at <= STALL_S + 3 * INTERVAL_S + 5, detected - blocked_at
    # Written for the owner only; summary on stderr.
    folder = found[0]
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(folder, "report.json")).st_mode) == 0o600
    assert "fork_inherited_lock" in err
    with open(os.path.join(folder, "outcome.json"), encoding="utf-8") as f:  # what became of it
        became = json.load(f)
    assert became["outcome"] == "terminated" and "dlwatch ended the job" in became["summary"], became
    # The inside view: the loader's settings, and the thread that held the lock at the fork.
    (loader,) = doc["inside_view"]["loaders"]
    assert loader["settings"]["num_workers"] == 2 and loader["pid"] == doc["job"]["pid"]
    assert set(loader["workers"]) == {w["pid"] for w in workers}
    code = loader["dataset_code"]  # where its fetches run, for a death that leaves no stack
    assert code["function"] == "FileDataset.__getitem__" and code["file"].endswith("probes/train.py"), code
    held = [e for e in first["evidence"] if "at the fork, thread lock-holder" in e]
    assert held and "held a lock named _SAMPLE_LOCK" in held[0] and "inside `with _SAMPLE_LOCK:`" in held[0], first[
        "evidence"
    ]
    (fork,) = doc["inside_view"]["threads_at_fork"]
    assert {t["name"] for t in fork["threads"]} >= {"MainThread", "lock-holder"} | ({"busy"} if busy_thread else set())


def _lock_line() -> int:
    with open(os.path.join(ROOT, "probes", "train.py"), encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if line.strip().startswith("with _SAMPLE_LOCK:"):
                return i
    raise AssertionError("lock line not found")


def test_fork_lock_without_ptrace_still_reports_from_proc_with_the_remedy(tmp_path):
    fake = os.path.join(os.path.dirname(__file__), "..", "fixtures", "fake-py-spy-ptrace-denied")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"py_spy:\n  path: {fake}\n")
    code, out, err = run_dlwatch(
        ["--config", str(cfg), *TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path / "r")],
        TRAIN + ["--fault", "fork-lock", "--num-workers", "2"],
    )
    assert code == 124, err
    # Without main's stack the worker proof is not enough at once: PyTorch's own shutdown could
    # still end such workers, so the job is ended only once that bound has passed.
    first_doc, doc = (load_report(f) for f in reports(str(tmp_path / "r")))
    assert first_doc["action"] == "report" and "shutdown" in first_doc["action_note"]
    assert doc["action"] == "terminate" and doc["stall"]["certainty"] == "proven"
    first = doc["diagnoses"][0]
    assert first["kind"] == "fork_inherited_lock"
    assert first["confidence"] < 0.7
    assert "SYS_PTRACE" in doc["pyspy_problem"] and "ptrace_scope" in doc["pyspy_problem"]
    assert "SYS_PTRACE" in err
    workers = [p for p in doc["processes"] if p["role"] == "dataloader_worker"]
    assert workers and all(p["threads_proc"] and p["threads_proc"][0]["wchan"] for p in workers)


def test_attach_finds_the_same_hang(tmp_path):
    job = start(TRAIN + ["--fault", "fork-lock", "--num-workers", "2"])
    watcher = None
    try:
        watcher = start(
            DLWATCH + ["attach", "--pid", str(job.pid), *TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path)]
        )
        out, err = watcher.communicate(timeout=120)
        assert watcher.returncode == 124, err
        (folder,) = reports(str(tmp_path))
        doc = load_report(folder)
        assert doc["diagnoses"][0]["kind"] == "fork_inherited_lock"
        assert doc["job"]["pid"] == job.pid
        job.wait(timeout=10)
    finally:
        kill_tree(job)
        if watcher is not None:
            kill_tree(watcher)


def test_attach_report_mode_exits_3_after_reporting(tmp_path):
    job = start(TRAIN + ["--fault", "fork-lock", "--num-workers", "2"])
    watcher = None
    try:
        watcher = start(
            DLWATCH + ["attach", "--pid", str(job.pid), "--stall-timeout", "3", "--report-dir", str(tmp_path)]
        )
        wait_for(lambda: reports(str(tmp_path)), 90, "a report")
        # report mode: the job keeps running and the same hang is not reported twice.
        import time

        time.sleep(6)
        assert job.poll() is None
        assert len(reports(str(tmp_path))) == 1
        kill_tree(job)
        out, err = watcher.communicate(timeout=30)
        assert watcher.returncode == 3, err
    finally:
        kill_tree(job)
        if watcher is not None:
            kill_tree(watcher)


def test_report_mode_reports_a_proven_hang_once_even_when_it_later_could_be_ended(tmp_path):
    # Without main's stack (py-spy denied) the first report proves the workers stuck but cannot
    # end the job until PyTorch's shutdown bound has passed (2 x 5 s + stall_timeout_s for one
    # worker); in report mode that later escalation adds nothing: no second report or alert.
    fake = os.path.join(os.path.dirname(__file__), "..", "fixtures", "fake-py-spy-ptrace-denied")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"py_spy:\n  path: {fake}\n")
    job = start(TRAIN + ["--fault", "fork-lock", "--num-workers", "1"])
    watcher = None
    try:
        watcher = start(
            DLWATCH
            + ["attach", "--pid", str(job.pid), "--config", str(cfg), "--stall-timeout", "3"]
            + ["--report-dir", str(tmp_path / "r")]
        )
        wait_for(lambda: reports(str(tmp_path / "r")), 90, "a report")
        (folder,) = reports(str(tmp_path / "r"))
        doc = load_report(folder)
        assert doc["stall"]["certainty"] == "proven" and doc["action"] == "report", doc["stall"]
        time.sleep(2 * 5 + 3 + 6 - doc["stall_s"] + 3)  # past the bound, and two examinations more
        assert job.poll() is None
        assert reports(str(tmp_path / "r")) == [folder]
        kill_tree(job)
        _out, err = watcher.communicate(timeout=30)
        assert watcher.returncode == 3, err
        assert err.count("job hung") == 1, err
    finally:
        kill_tree(job)
        if watcher is not None:
            kill_tree(watcher)


def test_job_exit_code_passes_through(tmp_path):
    code, _, err = run_dlwatch(
        ["--stall-timeout", "5", "--report-dir", str(tmp_path)], [PY, "-c", "import sys; sys.exit(3)"]
    )
    assert code == 3, err
    assert reports(str(tmp_path)) == []


def test_sleeping_main_is_stall_outside_loader_and_not_terminated(tmp_path):
    proc = start(
        DLWATCH
        + [
            "run",
            "--stall-timeout",
            "3",
            "--on-hang",
            "terminate",
            "--report-dir",
            str(tmp_path),
            "--",
            PY,
            "-c",
            "import time; from torch.utils.data import DataLoader\n"
            "for _ in DataLoader(range(8), num_workers=1): pass\n"  # a loader ran: then main sleeps outside it
            "time.sleep(600)",
        ]
    )
    try:
        (folder,) = wait_for(lambda: reports(str(tmp_path)), 90, "a report")
        doc = load_report(folder)
        assert doc["diagnoses"][0]["kind"] == "stall_outside_loader"
        assert all(d["kind"] not in ("fork_inherited_lock", "worker_stuck") for d in doc["diagnoses"])
        assert doc["action"] == "report"
        assert proc.poll() is None  # terminate_outside_loader is false: the job is left alone
    finally:
        kill_tree(proc)


def test_an_idle_script_that_never_made_a_dataloader_is_not_reported_as_hung(tmp_path):
    code, _out, err = run_bounded(
        DLWATCH
        + ["run", "--stall-timeout", "2", "--report-dir", str(tmp_path), "--", PY, "-c", "import time; time.sleep(9)"],
        60,
    )
    assert code == 0, err
    assert not reports(str(tmp_path)) and "job hung" not in err
    assert "created no DataLoader iterator yet" in err, err


def test_an_idle_script_with_torch_waits_for_its_dataloader_only_while_its_recorder_runs(tmp_path):
    idle = "import time, torch; time.sleep(9)"
    run = DLWATCH + ["run", "--stall-timeout", "2", "--report-dir"]
    code, _out, err = run_bounded(run + [str(tmp_path / "hooked"), "--", PY, "-c", idle], 60)
    assert code == 0 and "created no DataLoader iterator yet" in err, err  # main's recorder wrote its record
    # -I ignores PYTHONPATH: the hook never loads, nothing proves there is no DataLoader, the stall is judged
    code, _out, err = run_bounded(run + [str(tmp_path / "deaf"), "--", PY, "-I", "-c", idle], 60)
    assert "recorded nothing (the hook did not load in it): judged from outside" in err, err
    assert "created no DataLoader iterator yet" not in err, err


def test_worker_stuck_in_sleep_is_suspected_first_and_terminated_only_by_the_unproven_opt_in(tmp_path):
    # A sleep is a timed wait: it may end by itself, so the stall is reported as suspected and
    # the job is left alone; only the opt-in terminate_unproven_after_s ends it, nothing moving
    # (issue #34: busy_stall_timeout_s alone never ends a job; tests/real/test_terminate_proof.py).
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("busy_stall_timeout_s: 12\nterminate_unproven_after_s: 12\n")
    code, out, err = run_dlwatch(
        ["--config", str(cfg), *TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path / "r")],
        TRAIN + ["--fault", "worker-sleep", "--num-workers", "2", "--batch-size", "300", "--samples", "300"],
    )
    assert code == 124, err
    first, last = (load_report(f) for f in reports(str(tmp_path / "r")))
    assert first["diagnoses"][0]["kind"] == last["diagnoses"][0]["kind"] == "worker_stuck"
    assert "time.sleep" in " ".join(first["diagnoses"][0]["evidence"])
    assert first["action"] == "report" and "suspected" in first["action_note"]
    assert last["action"] == "terminate" and "terminate_unproven_after_s" in last["action_note"]
    assert last["stall"]["trigger"] == "busy_stall" and last["stall"]["certainty"] == "suspected"


@pytest.mark.parametrize(
    "job_args",
    [
        ["--sample-delay-s", "0.05", "--batch-size", "16", "--samples", "160", "--epochs", "2"],
        ["--validate-s", "7", "--epochs", "1", "--samples", "64"],
        ["--persistent-workers", "--epochs", "2"],
        ["--multiprocessing-context", "spawn", "--epochs", "1", "--samples", "64"],
        ["--multiprocessing-context", "forkserver", "--epochs", "1", "--samples", "64"],
    ],
    ids=["slow-storage", "long-validation", "persistent-workers", "spawn", "forkserver"],
)
def test_healthy_variants_are_never_reported(tmp_path, job_args):
    code, out, err = run_dlwatch(
        ["--stall-timeout", "4", "--on-hang", "terminate", "--report-dir", str(tmp_path)],
        TRAIN + ["--num-workers", "2"] + job_args,
    )
    assert code == 0, err
    assert reports(str(tmp_path)) == [], err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--interval", "-1", "--", "true"], "--interval"),
        (["run", "--interval", "abc", "--", "true"], "--interval"),
        (
            [
                "run",
                "--",
            ],
            "CMD",
        ),
        (["attach", "--pid", "999999999"], "999999999"),
        (["attach", "--pid", "1"], "--pid 1"),
        (["attach", "--pid", "-5"], "--pid -5"),
    ],
    ids=["negative-interval", "bad-type", "no-command", "dead-pid", "not-python-or-unreadable", "negative-pid"],
)
def test_bad_input_exits_2_naming_it(args, needle):
    done = subprocess.run(DLWATCH + args, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    "content, needle",
    [
        ("stall_timout_s: 5\n", "stall_timout_s"),
        ("interval_s: fast\n", "interval_s"),
        ("py_spy:\n  native: maybe\n", "py_spy.native"),
        ("on_hang: kill\n", "on_hang"),
        ("py_spy:\n  path: /nonexistent/py-spy\n", "py_spy.path"),
        ("interval_s: 1\ninterval_s: 2\n", "interval_s"),
        ('report_dir: "a\\0b"\n', "report_dir"),
    ],
    ids=["unknown-key", "bad-type", "nested-bad-type", "bad-choice", "missing-py-spy", "duplicate-key", "nul-byte"],
)
def test_bad_config_exits_2_naming_the_key(tmp_path, content, needle):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(content)
    done = subprocess.run(
        DLWATCH + ["run", "--config", str(cfg), "--", "true"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and str(cfg) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_stderr_passes_through_byte_for_byte(tmp_path):
    payload = "import sys; sys.stderr.buffer.write(bytes(range(256)) * 400); sys.stderr.flush()"
    done = subprocess.run(
        DLWATCH + ["run", "--report-dir", str(tmp_path), "--", PY, "-c", payload], capture_output=True, timeout=60
    )
    assert done.returncode == 0
    assert done.stderr == bytes(range(256)) * 400


def test_killing_dlwatch_does_not_break_the_jobs_stderr(tmp_path):
    marker = tmp_path / "finished"
    job = (
        "import sys, time\n"
        "for i in range(15):\n"
        "    print('tick', i, file=sys.stderr, flush=True)\n"
        "    time.sleep(0.2)\n"
        f"open({str(marker)!r}, 'w').write('ok')\n"
    )
    proc = start(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", PY, "-c", job])
    try:
        wait_for(
            lambda: any(c.name().startswith("python") for c in psutil.Process(proc.pid).children()),
            30,
            "the job to start",
        )
        os.kill(proc.pid, signal.SIGKILL)
        wait_for(marker.exists, 30, "the job to finish on its own after dlwatch died")
    finally:
        kill_tree(proc)


def test_closed_stderr_does_not_stop_dlwatch_or_the_job(tmp_path):
    done = subprocess.run(
        DLWATCH + ["run", "--report-dir", str(tmp_path), "--", "sh", "-c", "sleep 0.5; echo x >&2; exit 4"],
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: os.close(2),
        timeout=60,
    )
    assert done.returncode == 4


def test_crash_before_the_first_sample_is_still_diagnosed(tmp_path):
    code, _, err = run_dlwatch(
        ["--report-dir", str(tmp_path)],
        [PY, "-c", "raise SystemExit('DataLoader worker (pid 123) is killed by signal: Killed.')"],
    )
    assert code == 1, err
    (folder,) = reports(str(tmp_path))
    first = load_report(folder)["diagnoses"][0]
    assert first["kind"] == "worker_killed" and first["severity"] == "crash"
    assert any("has no sample of these workers" in e for e in first["evidence"])


def test_a_burst_of_signals_reaches_the_job_and_dlwatch_still_exits_with_its_code(tmp_path):
    # Signal handlers only enqueue and write to a self-pipe: a handler that took a lock the
    # interrupted loop held (threading.Event.set inside Event.wait) deadlocked dlwatch.
    job = (
        "import signal, sys, time\n"
        "n = 0\n"
        "def on_int(*_):\n"
        "    global n\n"
        "    n += 1\n"
        "signal.signal(signal.SIGINT, on_int)\n"
        "print('ready', flush=True)\n"
        "end = time.monotonic() + 6\n"
        "while time.monotonic() < end:\n"
        "    time.sleep(0.05)\n"
        "print('got', n, flush=True)\n"
        "sys.exit(5)\n"
    )
    proc = start(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", PY, "-c", job])
    try:
        assert proc.stdout.readline().strip() == "ready"
        for i in range(400):
            os.kill(proc.pid, signal.SIGINT)
            if i % 4 == 0:
                time.sleep(0.004)  # spread over the loop's wake-ups, where the old handler deadlocked
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 5, err
        assert int(out.split("got", 1)[1]) >= 1, out
    finally:
        kill_tree(proc)


def test_a_sigterm_the_moment_the_job_starts_still_reaches_the_job_and_never_leaves_it_unwatched(tmp_path):
    # dlwatch's handlers exist before the job does: a signal that came between the fork and the
    # handlers used to kill dlwatch with the default action and leave the job running alone.
    for attempt in range(8):
        proc = start(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", PY, "-c", "import time; time.sleep(60)"])
        job = None
        try:
            parent = psutil.Process(proc.pid)
            deadline = time.monotonic() + 30
            while job is None and time.monotonic() < deadline:
                kids = [c for c in parent.children() if "time.sleep(60)" in " ".join(c.cmdline())]
                job = kids[0] if kids else None
            assert job is not None, "the job never started"
            if attempt % 2:
                time.sleep(0.002 * attempt)
            os.kill(proc.pid, signal.SIGTERM)
            proc.communicate(timeout=30)
            assert proc.returncode in (128 + signal.SIGTERM, -signal.SIGTERM), proc.returncode
            assert psutil.wait_procs([job], timeout=10)[1] == [], f"attempt {attempt}: the job outlived dlwatch"
        finally:
            kill_tree(proc)


def test_a_job_stopped_by_the_users_sigterm_gets_no_crash_report(tmp_path):
    # The user ends `dlwatch run` with SIGTERM; dlwatch forwards it to the job's group, the
    # workers die with it and main exits 1: that is the signal's doing, not a crash (the crash
    # rules read "worker killed by signal Terminated" as the OOM killer's work).
    proc = start(
        DLWATCH
        + ["run", "--report-dir", str(tmp_path)]
        + ["--"]
        + TRAIN
        + ["--num-workers", "2", "--epochs", "1000", "--sample-delay-s", "0.01"]
    )
    try:
        wait_for(lambda: "workers-started" in proc.stdout.readline(), 60, "the workers")
        time.sleep(2)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert reports(str(tmp_path)) == [], err
        assert proc.returncode != 0, err
        if proc.returncode != 128 + signal.SIGTERM:  # the job's own handler made it exit otherwise
            assert "dlwatch forwarded to it: not diagnosed as a crash" in err, err
    finally:
        kill_tree(proc)


def test_attach_terminate_ends_the_jobs_tree_but_not_the_launcher_that_started_it(tmp_path):
    # The launcher shell shares the job's process group; ending the group would kill it too.
    marker = tmp_path / "launcher-survived"
    script = f"{PY} -m probes.train --fault fork-lock --num-workers 2 & wait $!; echo $? > {marker}; sleep 30"
    launcher = start(["sh", "-c", script])
    watcher = None
    try:
        job = _child(launcher.pid, "probes.train", 30, "the job")
        watcher = start(
            DLWATCH + ["attach", "--pid", str(job.pid), *TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path / "r")]
        )
        out, err = watcher.communicate(timeout=120)
        assert watcher.returncode == 124, err
        wait_for(marker.exists, 30, "the launcher to see its job end")
        assert launcher.poll() is None  # the launcher lives on
        assert int(marker.read_text()) in (128 + signal.SIGTERM, 128 + signal.SIGKILL, 1)
    finally:
        kill_tree(launcher)
        if watcher is not None:
            kill_tree(watcher)


def test_a_job_paused_with_sigstop_longer_than_the_stall_timeout_is_never_reported_or_ended(tmp_path):
    # A step-bound job (tests/real/test_stopped_not_input_bound.py's) stopped while main waits
    # in __next__ for a batch its worker still prepares: neither a hang nor input-bound (#38),
    # so no report at all, the input_bound warning included.
    script, marker = tmp_path / "stopped_job.py", tmp_path / "marker"
    script.write_text(STOPPED_JOB)
    proc = start(
        DLWATCH
        + ["run", "--stall-timeout", "5", "--on-hang", "terminate", "--report-dir", str(tmp_path / "r"), "--"]
        + [PY, str(script), str(marker), str(8 * 20)]
    )
    try:
        job = _child(proc.pid, str(script), 30, "the job")
        wait_for(lambda: marker.exists() or proc.poll() is not None, 120, "the marked sample", interval_s=0.05)
        assert proc.poll() is None, proc.communicate(timeout=60)
        time.sleep(1.0)  # main now waits in __next__ for the batch the sleeping worker owns
        os.killpg(job.pid, signal.SIGSTOP)  # as a debugger or an operator pausing the job
        time.sleep(12)
        os.killpg(job.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "done" in out
        assert reports(str(tmp_path / "r"), advice=True) == [], err
        assert "stopped" in err  # it says why it waits
    finally:
        kill_tree(proc)


def test_without_stacks_a_long_wait_outside_the_loader_is_never_ended_at_the_busy_stall_ceiling(tmp_path):
    # py-spy cannot read the job: nothing shows that main waits inside the loader, so the
    # busy-stall ceiling alone must not end a job that waits for a checkpoint upload.
    fake = os.path.join(os.path.dirname(__file__), "..", "fixtures", "fake-py-spy-ptrace-denied")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"busy_stall_timeout_s: 6\npy_spy:\n  path: {fake}\n")
    job = (
        "import threading, time, torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, num_workers=2, persistent_workers=True)\n"
        "for epoch in range(2):\n"
        "    for (x,) in loader:\n"
        "        pass\n"
        "    upload = threading.Thread(target=time.sleep, args=(12,))\n"
        "    upload.start()\n"
        "    upload.join()\n"
        "print('done', flush=True)\n"
    )
    code, out, err = run_dlwatch(
        ["--config", str(cfg), "--stall-timeout", "3", "--on-hang", "terminate", "--report-dir", str(tmp_path / "r")],
        [PY, "-c", job],
    )
    assert code == 0, err
    assert "done" in out
    assert all(load_report(f)["action"] == "report" for f in reports(str(tmp_path / "r")))


def test_an_alert_command_runs_after_a_hang_report_and_its_failure_changes_nothing(tmp_path):
    marker = tmp_path / "alert.txt"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "alerts:\n"
        f"  on_hang_exec: 'echo \"$DLWATCH_KIND $DLWATCH_MODE $DLWATCH_REPORT\" > {marker}'\n"
        "  on_crash_exec: 'exit 7'\n"
        "  exec_timeout_s: 20\n"
    )
    code, out, err = run_dlwatch(
        ["--config", str(cfg), *TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path / "r")],
        TRAIN + ["--fault", "fork-lock", "--num-workers", "2"],
    )
    assert code == 124, err
    kind, mode, folder = marker.read_text().split()
    assert kind == "fork_inherited_lock" and mode == "hang" and folder in reports(str(tmp_path / "r"))
    # A deterministic crash (a killed worker's job sometimes hangs at exit instead: a PyTorch race).
    crash = (
        "import sys; sys.stderr.write('RuntimeError: DataLoader worker (pid 12345) is killed by signal: Killed.\\n'); "
        "sys.exit(1)"
    )
    code, out, err = run_dlwatch(["--config", str(cfg), "--report-dir", str(tmp_path / "c")], [PY, "-c", crash])
    assert code == 1 and reports(str(tmp_path / "c"))  # the crash report was written
    assert "on_crash_exec exited with code 7" in err


def test_a_signal_while_alert_commands_run_after_the_job_ended_cuts_the_wait_short(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("alerts:\n  on_crash_exec: 'sleep 30'\n  exec_timeout_s: 40\n")
    crash = "import os, time; time.sleep(1.5); os.kill(os.getpid(), 9)"  # a crash report, then the hook
    out = tmp_path / "r"
    proc = start(DLWATCH + ["run", "--config", str(cfg), "--report-dir", str(out), "--", PY, "-c", crash])
    try:
        wait_for(lambda: reports(str(out)), 60, "the crash report")
        time.sleep(1.0)  # the hook is running now
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
        assert time.monotonic() - t0 < 10, "the wait for the alert command was not cut short"
        assert "cut the wait for alert commands short" in err, err[-2000:]
    finally:
        kill_tree(proc)


def test_ctrl_c_during_dlwatchs_own_start_up_is_one_line_and_130():
    for delay in (0.15, 0.3, 0.45, 0.6):
        # a job that prints nothing when interrupted; SIGINT as a terminal delivers it, even when
        # the test runner was started from a shell's background (which ignores SIGINT)
        proc = start(
            DLWATCH + ["run", "--", "sleep", "30"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
        )
        try:
            time.sleep(delay)  # inside dlwatch's imports, before or after its handlers exist
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=60)
            if "init_import_site" in err:
                continue  # still in the interpreter's own start-up, before any code of dlwatch's runs
            assert "Traceback" not in err, err
            assert proc.returncode in (130, -signal.SIGINT), (delay, proc.returncode, err)
        finally:
            kill_tree(proc)


def test_a_dlwatch_inside_the_job_is_a_wrapper_and_its_job_is_watched_as_main(tmp_path):
    inner = DLWATCH + ["run", "--no-hook", "--report-dir", str(tmp_path / "inner"), "--stall-timeout", "600", "--"]
    job = TRAIN + ["--fault", "fork-lock", "--num-workers", "2"]
    code, _out, err = run_dlwatch([*TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path / "outer")], inner + job)
    assert code == 124, err
    (folder,) = reports(str(tmp_path / "outer"))
    doc = load_report(folder)
    assert doc["diagnoses"][0]["kind"] == "fork_inherited_lock" and "rank" not in doc["job"], doc["job"]
    assert "probes.train" in " ".join(doc["job"]["cmdline"]) and "rank 0" not in err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_prometheus_metrics_are_served_while_a_real_job_runs(tmp_path):
    import socket
    import urllib.request

    port = _free_port()
    job = TRAIN + ["--num-workers", "2", "--epochs", "1", "--samples", "400", "--sample-delay-s", "0.05"]
    proc = start(DLWATCH + ["run", "--metrics-port", str(port), "--report-dir", str(tmp_path)] + ["--"] + job)
    try:

        def scrape():
            from prometheus_client.parser import text_string_to_metric_families

            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                return None
            series = {
                (s.name, tuple(sorted(s.labels.items())))
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            names = {name for name, _ in series}
            worker = {"role": "dataloader_worker", "worker_id": "1"}
            workers = [dict(ls) for name, ls in series if name == "dlwatch_process_resident_memory_bytes"]
            ok = "dlwatch_loader_batches" in names and any(worker.items() <= w.items() for w in workers)
            return (text, series) if ok else None

        text, series = wait_for(scrape, 60, "metrics with the loader's batches and the workers")
        node = socket.gethostname()
        empty_rank = {"node": node, "run_id": "", "rank": "", "local_rank": "", "group_rank": ""}
        main = tuple(sorted({**empty_rank, "role": "main", "worker_id": ""}.items()))
        assert ("dlwatch_process_cpu_seconds_total", main) in series
        assert "dlwatch_seconds_since_progress" in text and "dlwatch_shm_size_bytes" in text
        assert "dlwatch_last_progress_timestamp_seconds" in text
        assert "pid=" not in text  # workers get new pids every epoch: never a label
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    finally:
        kill_tree(proc)


def test_a_metrics_port_in_use_is_a_one_line_error_before_the_job_starts(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        marker = tmp_path / "started"
        done = subprocess.run(
            DLWATCH + ["run", "--metrics-port", str(port), "--", PY, "-c", f"open({str(marker)!r}, 'w')"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2 and "--metrics-port" in done.stderr and str(port) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not marker.exists()


def _run_with_pump(tmp_path, job):
    """``dlwatch run`` of ``job`` with its output to files (a pipe nobody reads would fill and
    block the pump before it sees EOF): ``(dlwatch, its stderr pump, {the pump's folder, the
    hook folder}``)."""
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = start(DLWATCH + ["run", "--report-dir", str(tmp_path), "--"] + job, stdout=out, stderr=err)
    try:
        pump = _child(proc.pid, "stderr_tail", 60, "the stderr pump")
    except BaseException:
        kill_tree(proc)
        raise
    tail_path, _limit, _dlwatch_pid, hook = pump.cmdline()[-4:]
    return proc, pump, {os.path.dirname(tail_path), hook}


def test_a_killed_dlwatch_leaves_no_folders_behind(tmp_path):
    import glob
    import tempfile

    def ours():
        return set(
            glob.glob(os.path.join(tempfile.gettempdir(), "dlwatch-stderr-*"))
            + glob.glob(os.path.join(tempfile.gettempdir(), "dlwatch-hook-*"))
        )

    proc, pump, new = _run_with_pump(tmp_path, TRAIN + ["--num-workers", "1", "--sample-delay-s", "0.05"])
    hook = next(p for p in new if "dlwatch-hook-" in p)
    try:
        assert new <= ours() and os.path.basename(hook).startswith("dlwatch-hook-")
        job = _child(proc.pid, "probes.train", 60, "the job")
        os.kill(proc.pid, signal.SIGKILL)  # dlwatch dies; its stderr pump lives on
        os.killpg(job.pid, signal.SIGKILL)  # then the job ends: its stderr closes, the pump sees EOF
        wait_for(lambda: not (new & ours()), 30, "the pump to remove the orphaned folders")
        wait_for(lambda: not pump.is_running(), 30, "the pump to exit")
    finally:
        kill_tree(proc)


def test_dlwatch_and_its_pump_killed_together_leave_folders_the_next_run_sweeps_hook_folder_included(tmp_path):
    import tempfile

    proc, pump, left = _run_with_pump(tmp_path, [PY, "-c", "import time; time.sleep(60)"])
    hook = next(p for p in left if "dlwatch-hook-" in p)
    try:
        pump.kill()
        os.kill(proc.pid, signal.SIGKILL)  # both at once (systemctl stop, a harness killing every descendant)
        proc.wait(10)
    finally:
        kill_tree(proc)
    assert all(os.path.isdir(p) for p in left)
    code, _out, err = run_bounded(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", PY, "-c", "pass"], 60)
    assert code == 0, err
    assert not any(os.path.exists(p) for p in left), [p for p in left if os.path.exists(p)]
    assert os.path.dirname(hook) == tempfile.gettempdir()


def test_attach_to_a_python_program_that_is_not_a_training_job_says_so(tmp_path):
    job = start([PY, "-c", "import time; time.sleep(120)", "--api-key=sk-live-123"])
    watcher = None
    try:
        watcher = start(
            DLWATCH + ["attach", "--pid", str(job.pid), "--stall-timeout", "3", "--report-dir", str(tmp_path)]
        )
        wait_for(lambda: reports(str(tmp_path)), 90, "a report")
        doc = load_report(reports(str(tmp_path))[0])
        first = doc["diagnoses"][0]
        assert first["summary"].startswith("No DataLoader or training loop was seen"), first
        assert first["confidence"] <= 0.3 and doc["action"] == "report"
        kill_tree(job)
        out, err = watcher.communicate(timeout=30)
        assert "has not imported torch" in err and "sk-live-123" not in err, err
    finally:
        kill_tree(job)
        if watcher is not None:
            kill_tree(watcher)
