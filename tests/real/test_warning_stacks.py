"""Stacks taken at a warning (``watchdog.collect.warning_stacks``): a real py-spy
``--nonblocking`` dump of a running process, taken in a thread of its own, that never leaves the
process stopped. The job is killed with its group whatever happens."""

from __future__ import annotations

import textwrap
import time

import psutil

from tests.real.helpers import PY, kill_tree, start, wait_for
from watchdog.collect import pyspy
from watchdog.collect.warning_stacks import WarningStacks

JOB = textwrap.dedent(
    """
    import time

    def keep_growing():
        kept = []
        while True:
            kept.append(bytearray(1 << 16))
            time.sleep(0.01)

    print("ready", flush=True)
    keep_growing()
    """
)


def test_a_warning_stack_names_the_function_the_process_runs_and_never_stops_it(tmp_path):
    path = pyspy.find_pyspy()
    assert path is not None, "py-spy is a test requirement"
    script = tmp_path / "grows.py"
    script.write_text(JOB)
    proc = start([PY, str(script)])
    try:
        wait_for(lambda: proc.stdout.readline().startswith("ready"), 60, "the job to start")
        stacks = WarningStacks(path)
        assert stacks.take([proc.pid], "main_memory_growth")
        states = []
        deadline = time.monotonic() + 30
        while not stacks.taken() and time.monotonic() < deadline:
            states.append(psutil.Process(proc.pid).status())
            time.sleep(0.005)
        stacks.wait(10)
        (kept,) = stacks.taken()
        assert kept.pid == proc.pid and kept.why == "main_memory_growth"
        functions = [f.function for t in kept.stack.threads for f in t.frames]
        assert "keep_growing" in functions, functions
        assert psutil.STATUS_STOPPED not in states and psutil.STATUS_TRACING_STOP not in states
        assert not WarningStacks(None).take([proc.pid], "x")  # no py-spy: nothing is started
    finally:
        kill_tree(proc)
