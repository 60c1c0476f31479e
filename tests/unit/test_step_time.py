"""The HTML report's "Where the step time goes" (issue #38, ``watchdog/report/step_time.py``):
built from a real report document (``watchdog.report.document.build``) of hand-built samples,
the same figures as the live verdict (``watchdog/diagnose/throughput.py``) gives on them, the
stopped time apart, and a report of another user's making (wrong types, markup in every string)
neither breaks the page nor puts its strings in it."""

from __future__ import annotations

import copy
import html as html_lib
import re

from tests.unit.builders import MAIN_PID
from tests.unit.test_throughput import facts, stopped_from, timeline
from watchdog.diagnose import diagnose
from watchdog.diagnose.throughput import judge
from watchdog.report import document as report
from watchdog.report import html, step_time


def _doc(tl) -> dict:
    f = facts(tl)
    found = [d for d in diagnose(f) if d.kind == "input_bound"]
    if not found:  # a report needs a finding: an input_bound warning of an input-bound job
        found = [
            d for d in diagnose(facts(timeline(0.6, cpu_share=0.95, state="R", wchan="0"))) if d.kind == "input_bound"
        ]
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": "t"}
    return report.build(f, found, job, 1.8e9, "report", None, {}, suffix="warning-input_bound").document


def _shares(parts):
    return {k: round(v, 3) for k, v in step_time.StepTime.shares(parts)}


def test_the_page_shows_where_the_step_time_goes_with_the_verdicts_own_figures():
    tl = timeline(0.6, cpu_share=0.95, state="R", wchan="0", workers=(2847,))
    doc = _doc(tl)
    j = judge(facts(tl))
    st = step_time.step_time(doc)
    assert st is not None and st.n_workers == 1 and round(st.window_s) == 30
    main = _shares(st.main)
    assert abs(main["data wait"] - (j.wait_share or 0)) < 0.01 and main["stopped"] == 0
    workers = _shares(st.workers)
    assert abs(workers["cpu"] - (j.share("cpu") or 0)) < 0.01 and workers["cpu"] == 0.95
    assert abs(sum(workers.values()) - 1) < 1e-6
    page = html.render(doc, "dlwatch: warning\n")
    section = page.split('<h2>Where the step time goes</h2><div class="plots" id="step-time">', 1)[1]
    section = section.split("</div>", 1)[0]
    assert "<td>main</td><td>data wait</td><td>60 %</td><td>18.0</td>" in section, section
    assert "<td>workers (1, summed)</td><td>cpu</td><td>95 %</td>" in section, section
    assert re.search(r'<img alt="Where the step time goes" src="data:image/png;base64,[A-Za-z0-9+/=]+">', section)


def test_stopped_time_is_its_own_part_not_data_wait_nor_io():
    # stopped 15 s inside __next__ of a 50 s window: the stop is 'stopped', main's data wait stays
    # at the 2 % it was, the workers are never 'io' for being stopped
    tl = stopped_from(timeline(0.02, cpu_share=0.1, seconds=50), 10, 25)
    st = step_time.step_time(_doc(tl))
    assert st is not None
    main, workers = dict(st.main), dict(st.workers)
    assert main["stopped"] == 17.0 and main["data wait"] < 0.05 * (50 - 17), main
    assert workers["stopped"] == 2 * 17.0 and workers["io"] == 0.0, workers
    page = html.render(_doc(tl), "x\n")
    assert "<td>main</td><td>stopped</td><td>34 %</td>" in page


def test_a_report_without_the_inside_view_or_workers_has_no_such_section():
    doc = _doc(timeline(0.6, cpu_share=0.95, state="R", wchan="0"))
    bare = {**doc, "timeline": [{**s, "loaders": [], "processes": []} for s in doc["timeline"]]}
    assert step_time.step_time(bare) is None
    assert "Where the step time goes" not in html.render(bare, "x\n")


def test_a_hand_made_report_of_wrong_types_or_markup_gets_no_section_and_its_strings_never_enter_it():
    doc = _doc(timeline(0.6, cpu_share=0.95, state="R", wchan="0"))
    evil = "<script>alert(1)</script>javascript:alert(1)"
    for change in (
        lambda s: s.update(t_mono="soon"),
        lambda s: s.update(t_mono=float("nan")),
        lambda s: s.update(loaders=[[MAIN_PID, 1, 0, 3, evil, None]]),
        lambda s: s.update(loaders=evil),
        lambda s: s["processes"][1].update(cpu_s=[evil]),
        lambda s: s["processes"][1].update(state=7),
        lambda s: s["processes"][0].update(pid=evil),
    ):
        bad = copy.deepcopy(doc)
        change(bad["timeline"][-3])
        assert step_time.step_time(bad) is None
        try:
            page = html.render(bad, "x\n")
        except (LookupError, TypeError, ValueError, AttributeError, ArithmeticError):
            continue  # the timeline's plots refuse it: `dlwatch show --html` says so in one line
        assert "Where the step time goes" not in page
    # strings of the report's own go nowhere near the section: only its labels and numbers do
    marked = copy.deepcopy(doc)
    for s in marked["timeline"]:
        for p in s["processes"]:
            p.update(wchan=evil + "poll", name=evil)
    page = html.render(marked, "x\n")
    section = page.split('id="step-time">', 1)[1].split("</div>", 1)[0]
    assert "script" not in section and "javascript" not in section
    assert "idle" in html_lib.unescape(section)  # the wchan still says poll: idle
