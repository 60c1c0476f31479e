"""Real processes for tests: start them in their own process group, wait for states with a
deadline, and always kill every process group they created (psutil's ``reap_children`` and
pystack's test utilities do the same)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Callable, List, Optional

from probes.repro import kill_session
from tests import report_schema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
TRAIN = [PY, "-m", "probes.train"]
DLWATCH = [PY, "-m", "watchdog"]


# dlwatch flags: examine a stall after 4 s, end a proven hang (SIGTERM, SIGKILL 2 s later).
TERMINATE_AFTER_4_S = ["--stall-timeout", "4", "--on-hang", "terminate", "--terminate-grace", "2"]


def start(cmd: List[str], **kw) -> subprocess.Popen:
    """Start ``cmd`` in a new session (so its whole group can be killed) from the repo root."""
    kw.setdefault("cwd", ROOT)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    return subprocess.Popen(cmd, start_new_session=True, **kw)


def run_bounded(cmd: List[str], timeout_s: float = 120, **kw):
    """Run ``cmd`` (see :func:`start`) to its end within ``timeout_s``; ``(exit code, stdout,
    stderr)``. Whatever happens, every process group it started is killed."""
    proc = start(cmd, **kw)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err
    finally:
        kill_tree(proc)


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``, every descendant and every process group among them, then reap."""
    kill_session(proc)


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.1):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def reports(report_dir: str, advice: bool = False) -> List[str]:
    """Finished report folders under ``report_dir`` (temporary ones excluded), oldest first;
    without ``advice``, not the performance advice a healthy job may get (``input_bound``
    warnings: a toy job that sleeps for its data is input-bound), which is no alarm."""
    if not os.path.isdir(report_dir):
        return []
    names = [n for n in os.listdir(report_dir) if not n.startswith(".")]
    names = [n for n in names if advice or not n.endswith("-warning-input_bound")]
    return sorted(os.path.join(report_dir, n) for n in names)


def load_report(folder: str) -> dict:
    """The ``report.json`` of a report folder, checked against its JSON Schema
    (``watchdog/report/schema/report.schema.json``), :func:`check_termination_proof` and
    :func:`check_no_contradiction`: every real test that reads a report validates it, no test
    accepts a job ended without a proof, nor a first finding its own figures contradict."""
    path = os.path.join(folder, "report.json")
    with open(path, encoding="utf-8") as f:
        doc = report_schema.check(json.load(f), path)
    check_termination_proof(doc, path)
    check_no_contradiction(doc, path)
    return doc


def input_bound_warning(case: str, base) -> str:
    """Run ``probes.cases.<case>`` (its command runs for up to 600 s) under ``dlwatch run``,
    warnings looked for every 2 s, until its ``input_bound`` warning is written (180 s at most),
    then end it; the warning's folder (a live report: checked)."""
    cfg = base / "settings.yaml"
    cfg.write_text("warning_interval_s: 2.0\n")
    out = base / "reports"
    job = start(
        DLWATCH
        + ["run", "--config", str(cfg), "--report-dir", str(out), "--", PY, "-m", f"probes.cases.{case}", "600"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        (folder,) = wait_for(
            lambda: [f for f in reports(str(out), advice=True) if f.endswith("-warning-input_bound")],
            180,
            f"the input_bound warning of {case}",
            interval_s=1.0,
        )
    finally:
        kill_tree(job)
    assert load_report(folder)["mode"] == "live", folder
    return folder


def check_no_contradiction(doc: dict, where: str) -> None:
    """Fail when the report's first finding is contradicted by a figure of the same report
    (issue #35): a worker the inside view saw exit with a code (0 or more) called killed or sent
    to the OOM killer; a ``shm_exhausted`` whose own evidence says its figures contradict it;
    copy-on-read advice while three or more iterators with persistent workers had workers alive."""
    found = doc.get("diagnoses") or []
    if not found:
        return
    first = found[0]
    loaders = (doc.get("inside_view") or {}).get("loaders") or []
    exited = {
        pid
        for v in loaders
        for pid, code in zip(v.get("workers") or [], v.get("worker_exitcodes") or [])
        if isinstance(code, int) and code >= 0
    }
    blamed = set(first.get("pids") or []) & exited
    text = f"{first.get('summary', '')} {first.get('remedy', '')}"
    assert not (blamed and ("killed by" in text or "OOM killer" in text or "dmesg" in text)), (
        f"{where}: {first['kind']} calls workers {sorted(blamed)} killed, though they exited with a code: {text}"
    )
    assert not (first.get("kind") == "shm_exhausted" and any("contradicted" in e for e in first.get("evidence", []))), (
        f"{where}: shm_exhausted comes first though its own figures contradict it"
    )
    kept = [v for v in loaders if (v.get("settings") or {}).get("persistent_workers") is True and v.get("workers")]
    alive = [v for v in kept if any(c is None for c in v.get("worker_exitcodes") or [None])]
    assert not (len(alive) >= 3 and "numpy arrays" in first.get("remedy", "")), (
        f"{where}: copy-on-read advice first with {len(alive)} persistent iterators alive"
    )
    if first.get("kind") == "input_bound":
        check_data_wait_figures(first, loaders, where)


_HEADLINE = re.compile(r"main waited for data (\d+) % of the (?:last )?(\d+) s")


def check_data_wait_figures(finding: dict, loaders: list, where: str) -> None:
    """Fail when an ``input_bound`` finding's headline ("main waited for data D % of the S s
    ...") contradicts the loader section of the same report (``inside_view.loaders``: each
    iterator's ``wait_s``, its ``data_wait_fraction`` of the time from its creation to its last
    batch, and ``last_batch_age_s``, from which its age follows): when every iterator of main was
    made within the S s, the span must not begin more than a sampling interval before the first
    (set-up time counted as "its step": "54 % of the last 21 s" beside "data wait 85%" for the
    same batches), and main's wait D x S must hold what those iterators waited. A headline with
    stopped time (its span is the window less the stop) is not checked."""
    evidence = finding.get("evidence") or []
    m = _HEADLINE.search(evidence[0]) if evidence else None
    if m is None or "stopped" in evidence[0]:
        return
    share, span = int(m.group(1)) / 100, float(m.group(2))
    pids = finding.get("pids") or []
    made = []  # (seconds since it was made, its wait)
    mains = [v for v in loaders if not pids or v.get("pid") == pids[0]]
    if not mains or min(int(v.get("iterator") or 0) for v in mains) > 1:
        return  # main's earlier iterators (epochs past) are not in the report: its first is older
    for v in mains:
        fraction, wait, age = v.get("data_wait_fraction"), v.get("wait_s"), v.get("last_batch_age_s")
        if not fraction or wait is None or age is None:
            return  # an iterator of unknown age: nothing to hold the span to
        made.append((age + wait / fraction, wait))
    slack = 3.0  # a sampling interval, and the rounding of S to seconds
    if not made or max(a for a, _ in made) > span + slack:
        return  # an iterator older than the window: its wait is partly before it
    first_made = max(a for a, _ in made)
    assert span <= first_made + slack, (
        f"{where}: the data wait is judged over {span:g} s, {span - first_made:.0f} s before main's first iterator "
        f"was made ({first_made:.1f} s ago): set-up time counted as its step: {evidence[0]}"
    )
    waited = sum(w for _, w in made)
    assert share * span >= waited - (0.01 * span + 0.5 * share + 1.0), (
        f"{where}: the headline's wait ({share:.0%} of {span:g} s) is less than the {waited:.1f} s main waited "
        f"in the iterators made within it: {evidence[0]}"
    )


def check_termination_proof(doc: dict, where: str) -> None:
    """Fail unless a report whose action ended the job (``action: terminate``) carries a proof:
    ``stall.certainty`` ``proven``, or the opt-in ``terminate_unproven_after_s`` named in its
    ``action_note`` (issue #34: ``on_hang: terminate`` ends a job only on a proof)."""
    if doc.get("action") != "terminate":
        return
    certainty = (doc.get("stall") or {}).get("certainty")
    note = doc.get("action_note") or ""
    assert certainty == "proven" or "terminate_unproven_after_s" in note, (
        f"{where}: the job was ended without a proof (certainty {certainty!r}, action_note {note!r})"
    )


def workers_started_t(stdout: str) -> Optional[float]:
    """The wall-clock time the job printed in its first ``workers-started`` line."""
    for line in stdout.splitlines():
        if "workers-started" in line:
            return float(line.rsplit("t=", 1)[1])
    return None


def plant_report(reports_dir, command, cwd, kind: str, mode: str = "hang", fix=None) -> str:
    """A report folder as dlwatch writes one (0700 in a new 0700 ``reports_dir``, ``report.json``
    0600) of a job that ran ``command`` in ``cwd`` as this user under ``dlwatch run``, whose first
    finding is ``kind`` with the fix ``fix`` (``remedy_apply``); its path. For the tests of
    ``dlwatch verify`` that need a report of a job of their own."""
    os.mkdir(reports_dir, 0o700)
    folder = os.path.join(str(reports_dir), "20261205T000000Z-1")
    os.mkdir(folder, 0o700)
    launch = {"command": list(command), "cwd": str(cwd), "uid": os.getuid(), "watched_by": "run"}
    doc = {"mode": mode, "diagnoses": [{"kind": kind, "remedy_apply": fix}], "job": {"launch": launch}}
    path = os.path.join(folder, "report.json")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return folder


def run_beside_outsider(tmp, job_src: str, outsider_src: str, sock_name: str, outsider_s: int, what: str) -> None:
    """Run ``job_src`` under ``dlwatch run`` (TERMINATE_AFTER_4_S) with a Manager address
    ``tmp/sock_name`` as its argument, beside ``outsider_src``: a process that is NOT of the job
    (started here, not by the job), given the address and ``outsider_s`` (seconds). Assert that
    no report ended the job (``what`` names the healthy job in the message), that it ended by
    itself with code 0 within ``outsider_s + 90`` seconds and printed ``step 3``. Both process
    groups are killed whatever happens."""
    job = tmp / "job.py"
    job.write_text(job_src)
    outsider = tmp / "outsider.py"
    outsider.write_text(outsider_src)
    addr = str(tmp / sock_name)
    report_dir = str(tmp / "r")
    out_path, err_path = tmp / "stdout", tmp / "stderr"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = start(
            DLWATCH + ["run", *TERMINATE_AFTER_4_S, "--report-dir", report_dir, "--", PY, str(job), addr],
            stdout=out,
            stderr=err,
        )
    outsider_proc = start([PY, str(outsider), addr, str(outsider_s)])
    try:
        try:
            code = proc.wait(timeout=outsider_s + 90)
        except Exception:
            code = None
        docs = [load_report(f) for f in reports(report_dir)]
        ended = [(d["stall"]["certainty"], d["action"], d["action_note"]) for d in docs if d["action"] == "terminate"]
        assert not ended, f"{what} was ended: {ended}"
        assert code == 0, (code, out_path.read_text()[-2000:], err_path.read_text()[-3000:])
        assert "step 3" in out_path.read_text()
    finally:
        kill_tree(proc)
        kill_tree(outsider_proc)


def processes_marked(marker: str, where: str = "cmdline") -> List[int]:
    """Pids of the processes (other than this one) whose ``/proc/PID/<where>`` (``cmdline`` or
    ``environ``) holds ``marker``: a test's own job and what it forked, found by a marker it put
    in their arguments or environment."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/{where}", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(entry))
            except OSError:
                pass
    return out
