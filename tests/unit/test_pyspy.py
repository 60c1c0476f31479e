"""The py-spy collector's deadline, process-group kill and loss reporting, against tiny fake
py-spy scripts (tests/fixtures/fake-py-spy-*) that hang, fail natively or stop their target.

Every test here is bounded by pytest-timeout, and kills (SIGKILL, by process group) whatever
the fakes recorded having started, should the code under test have failed to.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.unit.builders import fixture
from watchdog.collect import pyspy
from watchdog.types import StackFailureKind

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
HANGS = os.path.join(FIXTURES, "fake-py-spy-hangs")
NATIVE_HANGS = os.path.join(FIXTURES, "fake-py-spy-native-hangs")
NATIVE_FAILS = os.path.join(FIXTURES, "fake-py-spy-native-fails")
STOPS_TARGET = os.path.join(FIXTURES, "fake-py-spy-stops-target")
DENIED = os.path.join(FIXTURES, "fake-py-spy-ptrace-denied")

# PIDs above the kernel's largest pid_max (2^22): no process can have them, so nothing real is
# read or signalled on their account.
NO_SUCH_PIDS = [5_000_001 + i for i in range(6)]
SLACK_S = 1.0  # killing and reaping a process group, thread start-up on a loaded 2-CPU machine


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a zombie is dead, only not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A file the fakes append their pids to ($FAKE_PYSPY_PIDS); afterwards every group they
    led and every child they started is SIGKILLed, whatever the test did."""
    path = tmp_path / "fake-pids"
    monkeypatch.setenv("FAKE_PYSPY_PIDS", str(path))
    yield path
    for line in path.read_text().splitlines() if path.exists() else []:
        leader, child = map(int, line.split())
        for kill, target in ((os.killpg, leader), (os.kill, child)):
            try:
                kill(target, signal.SIGKILL)
            except OSError:
                pass


def _recorded_pids(path) -> list:
    return [int(x) for line in path.read_text().splitlines() for x in line.split()]


def _wait_gone(pids, timeout_s: float = 3.0) -> list:
    """The pids among ``pids`` still alive after up to ``timeout_s`` seconds."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


@pytest.mark.timeout(30)
def test_a_hanging_py_spy_and_its_child_are_killed_at_the_one_deadline(recorded):
    timeout_s = 1.0
    started = time.monotonic()
    stacks = pyspy.dump_all(NO_SUCH_PIDS, HANGS, True, timeout_s)
    elapsed = time.monotonic() - started
    assert elapsed < timeout_s + SLACK_S, f"dump_all took {elapsed:.2f} s for a {timeout_s} s deadline"
    assert set(stacks) == set(NO_SUCH_PIDS)
    for pid, st in stacks.items():
        assert not st.ok and "timed out" in st.error.detail and f"pid {pid}" in st.error.detail, st.error
        assert st.error.kind is StackFailureKind.TIMED_OUT
    started_pids = _recorded_pids(recorded)
    assert len(started_pids) == 2 * len(NO_SUCH_PIDS)  # one py-spy per pid, no second try after a timeout
    assert _wait_gone(started_pids) == [], "a fake py-spy or its child outlived the deadline"
    summary = pyspy.problem_summary(stacks, timeout_s)
    assert (
        summary.startswith(f"no stack for {len(NO_SUCH_PIDS)} of {len(NO_SUCH_PIDS)} processes")
        and "timed out" in summary
    )


@pytest.mark.timeout(30)
def test_the_native_attempt_and_its_fallback_share_one_deadline(recorded):
    # Before: each got the full timeout, so a hanging py-spy cost 2 x timeout per process.
    started = time.monotonic()
    st = pyspy.dump_with_fallback(NO_SUCH_PIDS[0], HANGS, True, 1.0, False, False)
    assert time.monotonic() - started < 1.0 + SLACK_S
    assert st.error.kind is StackFailureKind.TIMED_OUT
    assert _wait_gone(_recorded_pids(recorded)) == []


@pytest.mark.timeout(30)
def test_more_processes_than_threads_still_end_by_the_deadline(recorded):
    pids = [5_000_101 + i for i in range(pyspy.python_workers(10_000) + 4)]
    started = time.monotonic()
    stacks = pyspy.dump_all(pids, HANGS, False, 1.0)
    assert time.monotonic() - started < 1.0 + SLACK_S
    reasons = {st.error.kind for st in stacks.values()}
    assert reasons <= {StackFailureKind.TIMED_OUT, StackFailureKind.NOT_RUN} and StackFailureKind.TIMED_OUT in reasons
    assert _wait_gone(_recorded_pids(recorded)) == []


@pytest.mark.timeout(30)
def test_native_frames_lost_to_the_deadline_keep_the_python_stack_and_say_why(recorded):
    started = time.monotonic()
    stacks = pyspy.dump_all(NO_SUCH_PIDS, NATIVE_HANGS, True, 1.0)
    assert time.monotonic() - started < 1.0 + SLACK_S
    n = len(NO_SUCH_PIDS)
    for st in stacks.values():
        assert st.ok and st.threads and not st.native
        assert str(st.lost).startswith(
            ("native frames lost: py-spy --native timed out", "native frames lost: py-spy --native not run")
        ), st.lost
    # native_workers(n) hang until the deadline; the rest never got a slot.
    timed_out = [pid for pid, st in stacks.items() if st.lost.kind is StackFailureKind.TIMED_OUT]
    assert len(timed_out) == pyspy.native_workers(n)
    assert _wait_gone(_recorded_pids(recorded)) == []
    summary = pyspy.problem_summary(stacks, 1.0)
    assert summary.startswith(f"only Python frames for {n} of {n} processes (native frames lost): ")
    assert "timed out at the dump deadline: pid " in summary and "1 s after detection" in summary
    assert all(str(pid) in summary for pid in NO_SUCH_PIDS)


@pytest.mark.timeout(30)
def test_python_stacks_given_are_kept_when_native_fails_and_failures_are_named(tmp_path, monkeypatch):
    args = tmp_path / "args"
    monkeypatch.setenv("FAKE_PYSPY_ARGS", str(args))
    threads = pyspy.parse_dump(fixture("pyspy_worker_idle.json"))
    quick = {pid: pyspy.ProcessStack(pid, threads, False, None, "", 0.01) for pid in NO_SUCH_PIDS[:3]}
    stacks = pyspy.dump_all(NO_SUCH_PIDS[:4], NATIVE_FAILS, True, 5.0, python_stacks=quick)
    calls = args.read_text().splitlines()
    assert sum("--native" not in c for c in calls) == 1  # a Python-only dump only for the pid without one
    assert sum("--native" in c for c in calls) == 4
    for st in stacks.values():
        assert (
            st.ok
            and st.lost.kind is StackFailureKind.UNWIND_FAILED
            and "Failed to merge native and python frames" in st.lost.detail
        )
    summary = pyspy.problem_summary(stacks)
    assert "native unwinding failed: pid " + ", ".join(map(str, NO_SUCH_PIDS[:4])) in summary


@pytest.mark.timeout(30)
def test_native_dumps_run_a_few_per_cpu_at_a_time_main_first(tmp_path, monkeypatch):
    args, times = tmp_path / "args", tmp_path / "times"
    monkeypatch.setenv("FAKE_PYSPY_ARGS", str(args))
    monkeypatch.setenv("FAKE_PYSPY_TIMES", str(times))
    monkeypatch.setenv("FAKE_PYSPY_NATIVE_S", "0.3")
    pids = [5_000_201 + i for i in range(3 * pyspy.native_workers(10_000))]
    threads = pyspy.parse_dump(fixture("pyspy_worker_idle.json"))
    quick = {pid: pyspy.ProcessStack(pid, threads, False, None, "", 0.01) for pid in pids}
    pyspy.dump_all(pids, NATIVE_FAILS, True, 20.0, python_stacks=quick)
    natives = [int(c.split("--pid ")[1].split()[0]) for c in args.read_text().splitlines() if "--native" in c]
    k = pyspy.native_workers(len(pids))
    assert sorted(natives[:k]) == pids[:k]  # the first started are the first pids (main is first)
    spans = [tuple(map(float, line.split())) for line in times.read_text().splitlines()]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most <= k


@pytest.mark.timeout(30)
def test_a_process_in_d_state_is_read_nonblocking_and_its_native_loss_is_stated(tmp_path, monkeypatch):
    args = tmp_path / "args"
    monkeypatch.setenv("FAKE_PYSPY_ARGS", str(args))
    pid = NO_SUCH_PIDS[0]
    st = pyspy.dump_all([pid], NATIVE_FAILS, True, 5.0, disk_sleep=[pid])[pid]
    assert args.read_text().split() == ["dump", "--json", "--pid", str(pid), "--nonblocking"]
    assert st.ok and st.lost.kind is StackFailureKind.DISK_SLEEP


@pytest.mark.timeout(30)
def test_refused_ptrace_is_not_retried_natively_and_carries_the_remedy():
    stacks = pyspy.dump_all(NO_SUCH_PIDS[:2], DENIED, True, 5.0)
    for st in stacks.values():
        assert not st.ok and st.error.kind is StackFailureKind.PTRACE_REFUSED and "; then" not in st.error.detail
    summary = pyspy.problem_summary(stacks)
    assert summary.startswith("no stack for 2 of 2 processes: ptrace refused: pid") and "SYS_PTRACE" in summary


def test_a_missing_py_spy_is_stated_without_running_anything():
    stacks = pyspy.dump_all(NO_SUCH_PIDS[:2], None, True, 5.0)
    assert {st.error.kind for st in stacks.values()} == {StackFailureKind.NO_PYSPY}


def test_nothing_lost_means_no_problem_line():
    threads = pyspy.parse_dump(fixture("pyspy_worker_idle.json"))
    assert pyspy.problem_summary({1: pyspy.ProcessStack(1, threads, True, None, "", 0.1)}) is None


def test_a_deadline_already_passed_starts_no_py_spy(recorded):
    st = pyspy.dump(NO_SUCH_PIDS[0], HANGS, False, 5.0, deadline=time.monotonic() - 1)
    assert st.error.kind is StackFailureKind.NOT_RUN
    assert not recorded.exists()


@pytest.mark.timeout(30)
def test_a_target_left_stopped_by_a_killed_py_spy_is_continued():
    target = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        st = pyspy.dump(target.pid, STOPS_TARGET, True, 0.5)
        assert st.error.kind is StackFailureKind.TIMED_OUT and "SIGCONT sent" in st.error.detail
        with open(f"/proc/{target.pid}/stat", "rb") as f:
            assert f.read().rsplit(b")", 1)[1].split()[0] not in (b"T", b"t")
    finally:
        os.killpg(target.pid, signal.SIGKILL)
        target.wait(timeout=10)


def test_pool_sizes_follow_the_machine():
    cpus = pyspy.usable_cpus()
    assert pyspy.native_workers(1000) == 2 * cpus and pyspy.native_workers(1) == 1
    assert pyspy.python_workers(1000) == max(16, 4 * cpus) and pyspy.python_workers(3) == 3
