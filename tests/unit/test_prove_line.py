"""The ``prove:`` line of a report's summary: printed for each report ``dlwatch verify`` can
prove, the input-bound warning included (its change is proven by a throughput A/B)."""

from __future__ import annotations

import dataclasses

from tests.unit.builders import MAIN_PID, WORKER_PID, live_facts, loader_view, proc, sample
from watchdog.diagnose import diagnose
from watchdog.report import document, rendering
from watchdog.types import ROLE_MAIN, ROLE_WORKER, InsideView


def _cpu_bound_timeline(seconds: int = 30):
    """One worker computing 95 % of the time while main waits 60 % of its time for data."""
    out = []
    for t in range(seconds + 1):
        w = proc(WORKER_PID, ROLE_WORKER, [], "fork", ppid=MAIN_PID, cpu=0.95 * t, status="R", cpu_affinity=2)
        w = dataclasses.replace(w, wchan="0", runq_wait_s=None, start_ticks=WORKER_PID)
        main = dataclasses.replace(proc(MAIN_PID, ROLE_MAIN, [], cpu=0.1 * t, cpu_affinity=2), start_ticks=1)
        view = loader_view(
            settings=(("num_workers", 1), ("persistent_workers", False)), dataset_type="Images",
            workers=(WORKER_PID,), batches=2 * t, wait_s=0.6 * t, first_batch_s=None, waiting_since=None,
            waiting_idx=2 * t, waiting_worker=-1, last_batch=float(t), intervals=max(0, 2 * t - 1),
            interval_p50_s=0.1, interval_p99_s=0.2,
        )  # fmt: skip
        out.append(dataclasses.replace(sample(float(t), [main, w]), loaders=(view,)))
    return out


def test_an_input_bound_warning_prints_the_verify_line_that_proves_its_change():
    tl = _cpu_bound_timeline()
    facts = live_facts(tl, host_cpus=2, inside=InsideView(loaders=tl[-1].loaders))
    (d,) = [d for d in diagnose(facts) if d.kind == "input_bound"]
    launch = {"command": ["python", "train.py"], "cwd": "/srv/job", "watched_by": "run", "stdin": "null"}
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": "t", "launch": launch}
    doc = document.build(facts, (d,), job, 1.8e9, "report", None, {}, "warning-input_bound").document
    lines = list(rendering.text_lines(doc, "/r/20261205T000000Z-vm-1-warning-input_bound"))
    # --all-loaders: the built view names no site where main iterated (rendering.verify_flags)
    assert "  prove:  dlwatch verify --all-loaders /r/20261205T000000Z-vm-1-warning-input_bound" in lines, lines
    # a warning whose change verify cannot prove gets none
    other = {**doc, "diagnoses": [{**doc["diagnoses"][0], "kind": "iterable_replicated"}]}
    assert not any(line.startswith("  prove:") for line in rendering.text_lines(other, "/r/x"))
