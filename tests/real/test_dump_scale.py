"""Real py-spy on a real 1+N process tree (issue #10): every process gets a stack or a stated
problem, and the whole dump is over by its deadline, however many processes there are.

The tree is one Python process that imports torch (so that ``py-spy --native`` pays what it
pays on a DataLoader job: the symbols of libtorch, ~0.1 s of CPU per process) and forks N
children that sleep, as DataLoader workers waiting on a lock do. It runs in its own session and
is killed by process group in ``finally``; every test is bounded by pytest-timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.real.helpers import PY, start
from watchdog.collect import pyspy
from watchdog.types import StackFailureKind

N = 20
TREE = """
import os, sys, time
try:
    import torch  # noqa: F401  (what makes native dumps cost what they cost on a training job)
except ImportError:
    pass
kids = []
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    kids.append(pid)
print(" ".join(map(str, kids)), flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def tree():
    """The pids of a live 1+N tree, main first; the whole group is SIGKILLed afterwards."""
    proc = start([PY, "-c", TREE, str(N)])
    try:
        line = _readline(proc, 60)
        kids = [int(x) for x in line.split()]
        assert len(kids) == N, line
        time.sleep(0.5)  # let the last child reach its sleep
        yield [proc.pid] + kids
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate(timeout=10)


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    """The first stdout line of ``proc`` within ``timeout_s`` seconds."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout_s):
        raise AssertionError(f"the process tree printed nothing in {timeout_s} s")
    return proc.stdout.readline()


def _no_pyspy_left() -> list:
    return [p for p in psutil.Process().children(recursive=True) if "py-spy" in (p.name() or "")]


def _check_every_process(pids, stacks) -> dict:
    """Each pid has threads (its main thread sleeping in the script) or an error; each stack
    without native frames says why. Returns how many of each outcome."""
    assert set(stacks) == set(pids)
    seen = {"native": 0, "python only": 0, "no stack": 0}
    for pid in pids:
        st = stacks[pid]
        if not st.ok:
            assert st.error and st.error.kind and st.error.detail, f"pid {pid}: no stack and no reason"
            seen["no stack"] += 1
            continue
        assert any(f.function == "<module>" for t in st.threads for f in t.frames), f"pid {pid}: {st.threads}"
        if any(f.native for t in st.threads for f in t.frames):
            seen["native"] += 1
        else:
            assert st.lost and st.lost.what == "native frames" and st.lost.detail, (
                f"pid {pid}: Python-only stack, no reason given"
            )
            seen["python only"] += 1
    return seen


@pytest.mark.timeout(120)
def test_every_process_of_a_1_plus_20_tree_gets_native_frames_or_a_reason(tree):
    budget = 20.0  # generous: a loaded 2-CPU machine needs ~1-5 s for 21 native dumps
    started = time.monotonic()
    stacks = pyspy.dump_all(tree, pyspy.find_pyspy(), True, budget)
    wall = time.monotonic() - started
    seen = _check_every_process(tree, stacks)
    print(f"1+{N} native, {budget:g} s deadline: {wall:.2f} s; {seen}; {pyspy.problem_summary(stacks, budget)}")
    assert wall < budget + 2
    assert seen["native"] >= 1 and seen["no stack"] == 0
    assert _no_pyspy_left() == []


@pytest.mark.timeout(120)
def test_a_deadline_too_short_for_every_native_dump_is_kept_and_losses_are_stated(tree):
    budget = 1.0  # ~21 x 0.1 s of CPU of native dumps cannot fit on 2 CPUs; the Python-only ones can
    started = time.monotonic()
    stacks = pyspy.dump_all(tree, pyspy.find_pyspy(), True, budget)
    wall = time.monotonic() - started
    seen = _check_every_process(tree, stacks)
    summary = pyspy.problem_summary(stacks, budget)
    print(f"1+{N} native, {budget:g} s deadline: {wall:.2f} s; {seen}; {summary}")
    assert wall < budget + 1.5, f"{wall:.2f} s for a {budget} s deadline"
    if seen["python only"] or seen["no stack"]:
        assert summary and any(k.value in summary for k in (StackFailureKind.TIMED_OUT, StackFailureKind.NOT_RUN))
    assert _no_pyspy_left() == []
