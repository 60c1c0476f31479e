"""The input-bound verdict's defects a new-user trial found on a loaded 2-CPU machine (issue
#38, ``watchdog/diagnose/throughput.py`` and ``worker_time.py``), on hand-built timelines shaped
like the ones recorded from ``probes/cases/input_bound_cpu_epochs.py``:

* one CPU-bound worker started again each epoch (``persistent_workers=False``), seen in state R
  at every sample while other processes hold the CPUs, its run queue read at one sample or none:
  its time without a CPU was counted as blocked in the Dataset (49 %), and the verdict fell
  through to "idle 0 % ... the batches are in transit";
* the workers started one after another summed as if they ran at once (3.76 CPUs of 2);
* main's set-up before its first DataLoader iterator counted as its step: "54 % of the last
  21 s" beside the loader section's "data wait 85%" for the same 214 batches.

The same job for real: ``tests/real/test_cases.py`` (cases ``input_bound_cpu_epochs`` and
``input_bound_cpu_epochs_persistent``)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Optional

import pytest

from tests.unit.builders import MAIN_PID, live_facts, loader_view, proc, sample
from watchdog.diagnose import diagnose
from watchdog.diagnose.throughput import Verdict, judge
from watchdog.diagnose.worker_time import full_samples, worker_times, workers_at_once, workers_cpus
from watchdog.types import ROLE_MAIN, ROLE_WORKER, InsideView, Sample

EPOCH_S = 10  # seconds an epoch lasts
CPU_SHARE = 0.33  # of a CPU the worker gets beside other processes' load


def loader(iterator: int, created: float, batches: int, wait_s: float, last: Optional[float], worker: int, **kw):
    fields: Dict[str, Any] = dict(
        iterator=iterator,
        settings=(("num_workers", 1), ("persistent_workers", False)),
        dataset_type="Augment",
        workers=(worker,),
        created=created,
        batches=batches,
        wait_s=wait_s,
        first_batch_s=0.3 if batches else None,
        waiting_since=None,
        waiting_idx=batches,
        waiting_worker=-1,
        last_batch=last,
        intervals=max(0, batches - 1),
        interval_p50_s=0.25,
        interval_p99_s=0.4,
    )
    fields.update(kw)
    return loader_view(**fields)


def epochs_timeline(seconds: int = 60, setup_s: int = 0, wait_share: float = 0.9) -> List[Sample]:
    """One full sample a second of a job whose main waits ``wait_share`` of its time for one
    worker, started again each ``EPOCH_S`` seconds (a new pid), computing ``CPU_SHARE`` of a CPU
    and seen in state R at every sample; its run queue is read (a thread read) only at the
    worker's third sample. Main runs ``setup_s`` seconds before its first iterator."""
    out = []
    for t in range(seconds + 1):
        main = dataclasses.replace(proc(MAIN_PID, ROLE_MAIN, [], cpu=0.02 * t, cpu_affinity=2), start_ticks=1)
        procs = [main]
        loaders = []
        if t >= setup_s:
            run = t - setup_s
            epoch, into = divmod(run, EPOCH_S)
            pid = 2000 + epoch
            w = proc(pid, ROLE_WORKER, [], "fork", ppid=MAIN_PID, cpu=CPU_SHARE * into, status="R", cpu_affinity=2)
            runq = (1.0 - CPU_SHARE) * into if into == 3 else None
            procs.append(dataclasses.replace(w, wchan="0", start_ticks=pid, runq_wait_s=runq))
            for e in range(epoch + 1):
                start = setup_s + e * EPOCH_S
                age = min(t - start, EPOCH_S)
                batches = 4 * age
                loaders.append(loader(e + 1, float(start), batches, wait_share * age, float(start + age), 2000 + e))
        out.append(dataclasses.replace(sample(float(t), procs), loaders=tuple(loaders)))
    return out


def facts(tl):
    return live_facts(tl, host_cpus=2, inside=InsideView(loaders=tl[-1].loaders))


def test_a_cpu_bound_worker_started_again_each_epoch_on_a_busy_machine_is_cpu_bound_not_in_transit():
    tl = epochs_timeline()
    j = judge(facts(tl))
    # its time without a CPU, seen in state R at both ends, is runnable: never blocked in the Dataset
    assert (j.share("io") or 0) < 0.01 and (j.share("idle") or 0) < 0.01, j.evidence
    assert abs((j.share("runnable") or 0) - (1 - CPU_SHARE)) < 0.02, j.evidence
    assert j.verdict == Verdict.CPU_BOUND, j.summary
    assert j.fix is not None and dict(j.fix.loader) == {"num_workers": 2}, j.remedy
    assert "in transit" not in j.summary and "Return tensors" not in j.remedy
    (d,) = [d for d in diagnose(facts(tl)) if d.kind == "input_bound"]
    assert "CPU-bound" in d.summary and "num_workers=2" in d.remedy


def test_workers_started_one_after_another_use_one_workers_cpus_not_their_sum():
    workers = worker_times(full_samples(epochs_timeline()))
    assert len(workers) == 6
    # the old sum: 6 x 0.33 = 2.0 CPUs "of 2 usable", so "the usable CPUs are used"
    assert abs(workers_cpus(workers) - CPU_SHARE) < 0.05, workers_cpus(workers)
    assert abs((workers_at_once(workers) or 0) - 1.0) < 1e-9
    j = judge(facts(epochs_timeline()))
    assert any("6 worker process(es) in turn, 1.0 at once" in e for e in j.evidence), j.evidence


def test_a_worker_that_ended_within_a_pair_has_only_its_cpu_of_it_not_a_wait_in_the_dataset():
    def s(t, state, cpu):
        main = dataclasses.replace(proc(MAIN_PID, ROLE_MAIN, [], cpu_affinity=2), start_ticks=1)
        w = proc(3000, ROLE_WORKER, [], "fork", ppid=MAIN_PID, cpu=cpu, status=state, cpu_affinity=2)
        return sample(float(t), [main, dataclasses.replace(w, wchan="0", start_ticks=3000)])

    tl = [s(0, "R", 0.0), s(1, "R", 1.0), s(2, "Z", 1.2), s(3, "Z", 1.2)]
    (w,) = worker_times(tl)
    assert abs(w.span_s - 1.2) < 1e-9 and abs(w.running_s - 1.2) < 1e-9 and w.io_s == 0.0, w


def test_a_worker_busy_half_its_time_and_blocked_the_rest_is_never_called_idle():
    # computing 55 %, asleep in a read the rest, never in the index queue's poll: between the
    # I/O-bound line (busy under 50 %) and the CPU-bound one (60 %) the old code fell through to
    # "the workers are idle 0 % of their time ... the batches are in transit"
    out = []
    for t in range(31):
        main = dataclasses.replace(proc(MAIN_PID, ROLE_MAIN, [], cpu=0.05 * t, cpu_affinity=2), start_ticks=1)
        w = proc(4000, ROLE_WORKER, [], "fork", ppid=MAIN_PID, cpu=0.55 * t, status="S", cpu_affinity=2)
        w = dataclasses.replace(w, wchan="wait_woken", start_ticks=4000)
        v = loader(1, 0.0, 2 * t, 0.7 * t, float(t), 4000)
        out.append(dataclasses.replace(sample(float(t), [main, w]), loaders=(v,)))
    j = judge(facts(out))
    assert abs((j.share("io") or 0) - 0.45) < 0.01 and (j.share("idle") or 0) == 0
    assert j.verdict != Verdict.WORKERS_IDLE and "idle 0 %" not in j.summary, j.summary
    assert j.verdict == Verdict.CPU_BOUND and "45 % blocked in the Dataset" in j.summary, j.summary


def test_main_s_set_up_before_its_first_iterator_is_not_counted_as_its_step():
    # 8 s of imports and set-up, then one iterator waiting 85 % of its time: the old headline
    # said 85 % x 13 / 21 = 54 % "of the last 21 s" beside the loader's own 85 %
    tl = epochs_timeline(seconds=29, setup_s=8, wait_share=0.85)
    j = judge(facts(tl))
    # judged from the sample before the iterator's (7 s): 0.85 x 21 / 22
    assert j.wait_share is not None and j.wait_share > 0.8, j.evidence
    head = j.evidence[0]
    assert "since its first DataLoader iterator" in head and "of the last" not in head, head
    # the loader section's figure (wait over creation to last batch) and the headline agree
    v = tl[-1].loaders[0]
    assert v.data_wait_fraction is not None and abs(v.data_wait_fraction - j.wait_share) < 0.1


def test_a_window_that_begins_after_the_first_iterator_is_judged_whole():
    tl = epochs_timeline(seconds=90)
    j = judge(facts(tl))
    assert "of the last 60 s" in j.evidence[0] and j.span_s == 60.0, j.evidence[0]


# --- tests/real/helpers.check_no_contradiction holds a report's headline to its loader section


def _report(headline: str, loaders: list) -> dict:
    return {
        "diagnoses": [{"kind": "input_bound", "summary": "Input-bound: ...", "evidence": [headline], "remedy": "x"}],
        "inside_view": {"loaders": loaders},
    }


def _loader(batches, wait_s, fraction, last_batch_age_s):
    return {
        "pid": MAIN_PID,
        "iterator": 1,
        "batches": batches,
        "wait_s": wait_s,
        "data_wait_fraction": fraction,
        "last_batch_age_s": last_batch_age_s,
        "settings": {},
        "workers": [],
        "worker_exitcodes": [],
    }


def test_the_report_check_fails_a_headline_judged_over_time_before_the_only_iterator():
    from tests.real.helpers import check_no_contradiction

    # the trial's report: 214 batches in 13 s of the iterator's life, judged over 21 s
    old = _report(
        "main waited for data 54 % of the last 21 s (214 batches, 10.2/s); its step ran the rest",
        [_loader(214, 11.102, 0.8549, 0.05)],
    )
    with pytest.raises(AssertionError, match="before main's first iterator"):
        check_no_contradiction(old, "report.json")
    new = _report(
        "main waited for data 85 % of the 13 s since its first DataLoader iterator (214 batches, 16.5/s)",
        [_loader(214, 11.102, 0.8549, 0.05)],
    )
    check_no_contradiction(new, "report.json")
    # an iterator older than the window: its wait is partly before it, nothing to hold
    older = _report("main waited for data 40 % of the last 60 s (300 batches, 5.0/s)", [_loader(900, 200.0, 0.4, 0.1)])
    check_no_contradiction(older, "report.json")


def test_the_report_check_fails_a_headline_wait_below_what_its_new_iterators_waited():
    from tests.real.helpers import check_no_contradiction

    doc = _report(
        "main waited for data 20 % of the last 30 s (100 batches, 3.3/s)",
        [_loader(100, 12.0, 12.0 / 28, 1.0)],  # made 29 s ago, within the window, waited 12 s: more than 6 s
    )
    with pytest.raises(AssertionError, match="waited"):
        check_no_contradiction(doc, "report.json")


def test_the_headline_the_check_reads_is_the_one_the_verdict_writes():
    j = judge(facts(epochs_timeline(seconds=30, setup_s=8)))
    assert re.match(
        r"main waited for data \d+ % of the \d+ s since its first DataLoader iterator \(\d+ batches", j.evidence[0]
    )


def test_the_html_step_time_judges_the_same_span_as_the_verdict_after_main_s_set_up():
    # the page and the verdict read the same samples from the one before main's first iterator:
    # the page once counted the 8 s of set-up as "the rest", the verdict no longer does
    from watchdog.report import document as report
    from watchdog.report import step_time

    tl = epochs_timeline(seconds=29, setup_s=8, wait_share=0.85)
    f = facts(tl)
    found = [d for d in diagnose(f) if d.kind == "input_bound"]
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": "t"}
    doc = report.build(f, found, job, 1.8e9, "report", None, {}, suffix="warning-input_bound").document
    st = step_time.step_time(doc)
    j = judge(f)
    assert st is not None
    assert abs(st.window_s - j.span_s) < 1e-6, (st.window_s, j.span_s)
    main = dict(step_time.StepTime.shares(st.main))
    assert abs(main["data wait"] - (j.wait_share or 0)) < 0.01, (main, j.wait_share)


def test_the_loader_section_says_what_its_data_wait_is_a_share_of():
    # "214 batches (epoch 0); data wait 85%" beside "54 % of the last 21 s": two figures read as one
    from tests.real.helpers import check_no_contradiction
    from watchdog.report import document as report

    tl = epochs_timeline(seconds=29, setup_s=8, wait_share=0.85)
    f = facts(tl)
    found = [d for d in diagnose(f) if d.kind == "input_bound"]
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": "t"}
    built = report.build(f, found, job, 1.8e9, "report", None, {}, suffix="warning-input_bound")
    lines = [x for x in built.text.splitlines() if "; data wait " in x]
    assert lines and all("of the time from its creation to its last batch (8.5 of 10.0 s)" in x for x in lines[:2])
    assert any("since its first DataLoader iterator" in x for x in built.text.splitlines()), built.text
    check_no_contradiction(built.document, "report.json")
