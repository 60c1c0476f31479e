"""How a process that ``multiprocessing`` started says it ended (the recorder's ``_on_mp_end``,
a ``multiprocessing.util`` finalizer; issue #34 section 2): real processes that raise, exit,
call ``sys.exit(3)`` or are SIGKILLed, read back through the inside view's reader; a record of
the wrong shape is refused; what the report says of a producer its parent reaped."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.unit.builders import HELPER_PID, ended_helper_facts, fixture
from watchdog.collect import inside
from watchdog.diagnose import ended
from watchdog.diagnose.hangs import ended_helpers
from watchdog.types import InsideView, ProcessEnd

_JOB = """
import importlib.util, multiprocessing as mp, os, sys
spec = importlib.util.spec_from_file_location("rec", os.path.join(sys.argv[2], "_dlwatch_inside.py"))
rec = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rec)
rec._FOLDER = sys.argv[1]
from multiprocessing import util
util.register_after_fork(rec._ANCHOR, rec._after_mp_start)

def bad():
    raise RuntimeError("could not prepare the shards: /data/shards is empty")

def good():
    pass

def code3():
    sys.exit(3)

def killed():
    os.kill(os.getpid(), 9)

def _worker_loop():  # named as PyTorch's worker loop: PyTorch says how those end
    raise RuntimeError("a worker's own")

if __name__ == "__main__":
    pids = []
    for f in (bad, good, code3, killed, _worker_loop):
        p = mp.get_context("fork").Process(target=f, name="shard-" + f.__name__)
        p.start()
        p.join(30)
        pids.append(p.pid)
    print(" ".join(map(str, pids)), flush=True)
"""


def test_a_multiprocessing_process_records_its_exit_code_and_uncaught_exception_as_it_ends(tmp_path):
    folder = tmp_path / "hook"
    folder.mkdir(mode=0o700)
    done = subprocess.run(
        [sys.executable, "-c", _JOB, str(folder), inside.BOOT_DIR], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    bad, good, code3, killed, worker = map(int, done.stdout.split())
    assert "RuntimeError: could not prepare the shards" in done.stderr  # the job's stderr is unchanged
    assert "_on_mp_end" not in done.stderr and "Error calling finalizer" not in done.stderr
    ends = {e.pid: e for e in inside.InsideReader(str(folder)).read().ends}
    assert set(ends) == {bad, good, code3}  # SIGKILL leaves no record; a DataLoader worker is not ours
    assert (
        ends[bad].code == 1
        and ends[bad].exception == "RuntimeError: could not prepare the shards: /data/shards is empty"
    )
    assert ends[bad].name == "shard-bad" and ends[bad].at_mono is not None
    assert ends[good].code == 0 and ends[good].exception is None
    assert ends[code3].code == 3 and ends[code3].exception is None
    assert killed not in ends and worker not in ends


@pytest.mark.parametrize(
    "ended_doc",
    [{"code": "1"}, {"exception": "x" * (inside.FORMAT.MAX_ENDED_TEXT + 1)}, {"name": ["a"]}, ["code", 1]],
)
def test_an_end_record_of_another_shape_is_refused(ended_doc):
    with pytest.raises(ValueError):
        inside.parse_record(json.dumps({"pid": 5, "ended": ended_doc}).encode())


PRODUCER = HELPER_PID


def _facts(end: ProcessEnd, status=None):
    return ended_helper_facts(
        status, stderr_tail=fixture("stderr_ready_marker_producer_died.txt"), inside=InsideView(ends=(end,))
    )


def _line(facts):
    ((p, ago),) = ended_helpers(facts)
    return ended.ended_line(facts, p, ago, ended.records_of(facts, [p]))


def test_a_producer_its_parent_reaped_is_named_from_its_own_record():
    # main joined the producer (it reaped it): no exit status was read, but the producer said.
    end = ProcessEnd(
        PRODUCER, "shard-producer", 1, "RuntimeError: could not prepare the shards: /data/shards is empty", 1.5
    )
    text = _line(_facts(end))
    assert "its parent reaped it first" in text and "ended without a record" not in text
    assert (
        "as Process shard-producer" in text and "exit code 1 after an uncaught RuntimeError: could not prepare" in text
    )
    assert "ends in produce at" in text and "ready_marker_producer_died.py:25" in text


def test_an_end_recorded_before_it_was_last_seen_is_another_process_with_that_pid():
    old = ProcessEnd(PRODUCER, "shard-producer", 1, "RuntimeError: an earlier one", -50.0)
    text = _line(_facts(old))
    assert "an earlier one" not in text and "ended without a record" in text


def test_what_the_job_wrote_reaches_the_report_on_one_printable_line():
    end = ProcessEnd(PRODUCER, "x\x1b]0;pwned\x07", 1, "RuntimeError: a\nfake line\x1b[2J", 1.5)
    text = _line(_facts(end))
    assert "\x1b" not in text and "\n" not in text and "\\x1b" in text and "\\n" in text
