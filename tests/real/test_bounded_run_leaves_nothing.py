"""A bounded run (``dlwatch run --stop-after-batches K``, as ``dlwatch verify`` starts) ends every
process of its job, and the job's stderr pump ends with them (it lives while anyone holds the
job's stderr open): the processes forked while the job was being ended, those that left the
job's tree (their parent died), and those in a process group the job made.

Each job is found afterwards by a marker in its environment (inherited by every process it
forks), the pump by the job's private temporary folder in its arguments; whatever is found is
SIGKILLed by the test before it fails. Real processes, real DataLoader workers (torch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from typing import List

import pytest

from tests.real.helpers import DLWATCH, PY, kill_tree, processes_marked, start

pytestmark = pytest.mark.timeout(300)

# Each epoch is 2 batches with a new DataLoader iterator (persistent_workers=False): new workers each
# epoch, each opening its store for 0.3 s. Each worker also starts the store's client daemon the way
# a daemon starts (it forks, the child makes a process group of its own, the middle process exits):
# it leaves the job's tree and group at once. A new daemon each epoch, started after any sample.
_EPOCHS_WITH_DAEMONS = """
import os, time
import torch
from torch.utils.data import DataLoader

def open_store(_worker_id):
    if os.fork() == 0:
        os.setpgid(0, 0)
        if os.fork() == 0:
            time.sleep(600)  # the store's client daemon
            os._exit(0)
        os._exit(0)
    time.sleep(0.3)

loader = DataLoader(list(range(8)), batch_size=4, num_workers=2, worker_init_fn=open_store)
while True:
    for _batch in loader:
        time.sleep(0.01)
"""

# On SIGTERM the job runs a last evaluation pass with a new DataLoader iterator: its workers are
# forked during the grace period, after any sample, and each starts the store's client daemon in the
# job's own process group (fork, fork, the middle process exits: the daemon's parent is init at once),
# then takes 60 s to open the store. Main waits for them until the grace period's SIGKILL, unless
# dlwatch ends them first.
_EVALUATE_ON_SIGTERM = """
import os, signal, sys, time
import torch
from torch.utils.data import DataLoader

def open_store(_worker_id):
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(600)  # the store's client daemon
            os._exit(0)
        os._exit(0)
    time.sleep(60)

def evaluate(*_):
    print("evaluating", file=sys.stderr, flush=True)
    for _batch in DataLoader(list(range(8)), batch_size=4, num_workers=2, worker_init_fn=open_store):
        pass

signal.signal(signal.SIGTERM, evaluate)
loader = DataLoader(list(range(8)), batch_size=4, num_workers=0)
while True:
    for _batch in loader:
        time.sleep(0.02)
"""


def _marked(marker: str) -> List[int]:
    """Pids of the processes whose environment holds ``marker`` (we run them as ourselves)."""
    return processes_marked(marker, "environ")


def _pumps(folder: str) -> List[int]:
    """Pids of the stderr pumps (``python -m watchdog.collect.stderr_tail TAIL …``) whose tail
    file lies in ``folder`` (the dlwatch run's TMPDIR)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"watchdog.collect.stderr_tail" in argv and any(a.startswith(folder.encode()) for a in argv):
                out.append(int(entry))
    return out


def _left(marker: str, folder: str, wait_s: float) -> List[str]:
    """What of the job and its pump is alive ``wait_s`` seconds from now at the latest (polled:
    a process that ends meanwhile is not counted), as ``ps`` lines; then SIGKILLs it all."""
    deadline = time.monotonic() + wait_s
    while True:
        pids = _marked(marker) + _pumps(folder)
        if not pids or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    lines = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
            lines.append(f"pid {pid} ppid {fields[1]} pgrp {fields[2]} session {fields[3]}: {argv}")
        except OSError:
            pass
    for pid in pids:  # ours: started by this test's job, found by its marker
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return lines


def _bounded_run(source: str, batches: int, tmp, leader: bool, sibling: str = "") -> tuple:
    """Run ``source`` under ``dlwatch run --stop-after-batches batches`` (grace 1 s), dlwatch
    leading its session (``leader``) or run from a shell that does; with ``sibling`` (a
    marker), the session's shell first starts a ``sleep`` with that marker in its environment,
    then becomes dlwatch (``exec``); ``(exit code, stderr, marker)``."""
    marker = f"DLWATCH_LEFTOVER_TEST={uuid.uuid4().hex}"
    env = {**os.environ, "TMPDIR": str(tmp), marker.split("=")[0]: marker.split("=")[1]}
    cmd = DLWATCH + ["run", "--terminate-grace", "1", "--stop-after-batches", str(batches), "--", PY, "-c", source]
    if not leader:  # the shell leads the session and waits for dlwatch (no exec: a command follows)
        cmd = ["sh", "-c", '"$@"; status=$?; exit $status', "sh", *cmd]
    if sibling:  # a container's entrypoint: a log shipper, then exec the watched job
        cmd = ["sh", "-c", f'env -u {marker.split("=")[0]} {sibling} sleep 300 & exec "$@"', "sh", *cmd]
    # Files, not pipes: a process the job left behind would hold a pipe open, and the test would
    # wait for it instead of failing.
    err_path = os.path.join(str(tmp), "dlwatch-stderr.txt")
    with open(err_path, "w") as err_file:
        proc = start(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err_file)
    try:
        code = proc.wait(150)
    except BaseException:  # a timeout, an interrupt: end what was started, then fail
        kill_tree(proc)
        _left(marker, str(tmp), 0)
        raise
    with open(err_path, encoding="utf-8", errors="replace") as f:
        err = f.read()
    return code, err, marker


@pytest.mark.parametrize("batches", [4, 7])
def test_a_bounded_run_ends_the_daemons_its_job_started_outside_its_tree_and_group(batches, short_tmp_path):
    """Old code: each worker's daemon (its own group, parent init) outlived the run, and the
    stderr pump with it."""
    code, err, marker = _bounded_run(_EPOCHS_WITH_DAEMONS, batches, short_tmp_path, leader=True)
    left = _left(marker, str(short_tmp_path), 5.0)
    assert code == 0, err[-3000:]
    assert "reached its bound" in err, err[-3000:]
    assert not left, "\n".join(left) + "\n" + err[-2000:]


@pytest.mark.parametrize("leader", [True, False], ids=["dlwatch-leads-its-session", "run-from-a-shell"])
def test_a_bounded_run_ends_the_workers_and_daemons_its_job_started_during_the_grace_period(leader, short_tmp_path):
    """Old code: the daemons the evaluation's workers started (in the job's group, after the
    SIGTERM, their parent init) outlived the run, and the stderr pump with them. Now the
    workers are found during the grace period and ended with the daemons (main's evaluation
    then fails and main exits); from a shell (dlwatch does not lead the session) the daemons
    are found as members of the job's group."""
    code, err, marker = _bounded_run(_EVALUATE_ON_SIGTERM, 20, short_tmp_path, leader=leader)
    left = _left(marker, str(short_tmp_path), 5.0)
    assert code == 0, err[-3000:]
    assert "evaluating" in err, err[-3000:]  # the evaluation's workers were forked after the SIGTERM
    assert not left, "\n".join(left) + "\n" + err[-2000:]


def test_a_process_that_shared_dlwatchs_session_before_it_started_is_never_swept(short_tmp_path):
    """``sh -c 'logger & exec dlwatch run …'`` (a container's entrypoint): dlwatch then leads a
    session that already held another process, which is not the job's. The sweep of dlwatch's
    own session (a bounded run's end) must leave it alone; the job's own processes still end
    (found in its tree and group). Before: the logger was SIGTERMed with the job."""
    sibling = f"DLWATCH_SIBLING_TEST={uuid.uuid4().hex}"
    code, err, marker = _bounded_run(_EVALUATE_ON_SIGTERM, 20, short_tmp_path, leader=True, sibling=sibling)
    try:
        alive = _marked(sibling)
        left = _left(marker, str(short_tmp_path), 5.0)
        assert code == 0, err[-3000:]
        assert alive, "the session's other process was ended with the job"
        assert not left, "\n".join(left) + "\n" + err[-2000:]
    finally:
        for pid in _marked(sibling):
            os.kill(pid, signal.SIGKILL)
