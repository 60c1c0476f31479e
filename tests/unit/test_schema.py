"""report.json against its committed JSON Schema (watchdog/report/schema/report.schema.json): the schema
is a valid draft 2020-12 schema, and every kind of document ``report.build`` makes (hang with
stacks, hang without them, crash, warning, exit) conforms once written as the writer writes it."""

from __future__ import annotations

import copy
import json
import os

import pytest

from tests.report_schema import check, errors, schema
from tests.unit.builders import (
    LOCK_UNTIMED,
    MAIN_PID,
    WORKER_PID,
    detail,
    fixture,
    hang_facts,
    oversubscribed_timeline,
    proc,
    sample,
    thread,
)
from watchdog import __version__
from watchdog.collect import inside, pyspy
from watchdog.diagnose import diagnose
from watchdog.report import document as report
from watchdog.report import writer
from watchdog.types import (
    MODE_CRASH,
    MODE_EXIT,
    MODE_LIVE,
    ROLE_MAIN,
    ROLE_WORKER,
    Facts,
    Frame,
    Proof,
    ProofKind,
    ProofLink,
    ThreadStack,
)

INSIDE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "inside")
INFO = {
    "version": __version__,
    "py_spy": "/usr/local/bin/py-spy",
    "settings": {"stall_timeout_s": 60.0, "on_hang": "report", "py_spy": {"native": True}},
}
JOB = {
    "pid": MAIN_PID,
    "cmdline": ["python", "train.py", "--api-key=secret"],
    "start_time": "2027-01-05T10:00:00.000Z",
    "root_pid": MAIN_PID,
}


def _written(tmp_path, facts, found=None, job=JOB, action="report", env=None, suffix=""):
    """The report.json the writer writes for these facts, read back."""
    found = list(found if found is not None else diagnose(facts))
    assert found, "the facts must give a finding"
    rep = report.build(facts, found, dict(job), 1.8e9, action, env, INFO, suffix)
    folder = writer.write(rep, str(tmp_path))
    with open(os.path.join(folder, "report.json"), encoding="utf-8") as f:
        return json.load(f)


def _proof(*pids):
    return Proof(
        ProofKind.KERNEL, tuple(pids), tuple(ProofLink(p, p, "x", "futex, no timeout") for p in pids), "conclusion"
    )


def _hang(**kw):
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    return hang_facts([t], **kw)


def test_the_schema_is_a_valid_draft_2020_12_schema_of_this_version():
    from jsonschema import Draft202012Validator

    s = schema()
    Draft202012Validator.check_schema(s)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema" and s["$id"]
    assert s["properties"]["schema_version"]["const"] == report.SCHEMA_VERSION == 2
    assert s["additionalProperties"] is False and set(s["required"]) == set(s["properties"])
    assert all(p.get("description") for p in s["properties"].values()), [
        k for k, p in s["properties"].items() if not p.get("description")
    ]


def test_a_hang_report_with_stacks_proof_inside_view_and_rank_conforms(tmp_path):
    facts = _hang(proof=_proof(WORKER_PID), assessment="proven: test", inside=inside.InsideReader(INSIDE).read())
    job = {**JOB, "rank": {"RANK": "1", "WORLD_SIZE": "2"}}
    doc = check(_written(tmp_path, facts, job=job, action="terminate", env={"HOME": "/root"}))
    assert doc["mode"] == "hang" and doc["stall"]["certainty"] == "proven" and doc["inside_view"]["loaders"]
    assert doc["inside_view"]["threads_at_fork"] and doc["timeline"]
    # The raw stack layer keeps py-spy's key names.
    main = next(p for p in doc["processes"] if p["pid"] == MAIN_PID)
    t = main["stack"]["threads"][0]
    assert {"os_thread_id", "thread_name", "active", "owns_gil", "frames"} <= set(t) and "tid" not in t
    f = t["frames"][0]
    assert {"name", "filename", "short_filename", "module", "line", "native"} <= set(f) and "function" not in f
    assert any(fr["short_filename"] for th in main["stack"]["threads"] for fr in th["frames"])


def test_a_hang_report_with_locals_and_with_a_stack_py_spy_could_not_read_conforms(tmp_path):
    frame = Frame("fetch", "/job/data.py", 12, False, locals=(("path", "'/data/x'"),), short_filename="data.py")
    worker = ThreadStack(WORKER_PID, "MainThread", False, False, (frame,))
    doc = check(_written(tmp_path / "a", hang_facts([worker])))
    (f,) = next(p for p in doc["processes"] if p["pid"] == WORKER_PID)["stack"]["threads"][0]["frames"]
    assert f["locals"] == {"path": "'/data/x'"} and f["short_filename"] == "data.py" and f["module"] is None
    facts = hang_facts([], stacks_ok=False, pyspy_problem="py-spy cannot attach (ptrace denied); run as root")
    doc = check(_written(tmp_path / "b", facts))
    assert doc["pyspy_problem"] and any(p["stack"] and p["stack"]["error"] for p in doc["processes"])


def test_a_crash_report_conforms(tmp_path):
    workers = [proc(p, ROLE_WORKER, [thread(p)], "fork") for p in (WORKER_PID, WORKER_PID + 1)]
    smp = sample(
        50.0,
        [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]), *workers],
        shm_total=1 << 30,
        shm_used=1 << 20,
        max_maps=65530,
    )
    facts = Facts(
        mode=MODE_CRASH,
        sample=smp,
        timeline=(smp,),
        stderr_tail=fixture("stderr_worker_segfault.txt"),
        exit_code=1,
        oom_kills=0,
    )
    doc = check(_written(tmp_path, facts, action="none (the job had already exited)", suffix="crash"))
    assert (
        doc["mode"] == "crash"
        and doc["diagnoses"][0]["severity"] == "crash"
        and doc["stall"] is None
        and doc["verdict"] is None
    )


def test_a_warning_and_an_exit_report_conform(tmp_path):
    timeline = oversubscribed_timeline()
    facts = Facts(
        mode=MODE_LIVE,
        sample=timeline[-1],
        timeline=timeline,
        host_cpus=4,
        thread_details=((100, (detail(100, LOCK_UNTIMED),)),),
    )
    found = diagnose(facts)
    assert found and all(d.severity == "warning" for d in found)
    doc = check(_written(tmp_path / "w", facts, found[:1], env={"PATH": "/usr/bin"}, suffix=f"warning-{found[0].kind}"))
    assert doc["mode"] == "live" and doc["diagnoses"][0]["certainty"] is None
    smp = sample(1.0, [])
    facts = Facts(mode=MODE_EXIT, sample=smp, timeline=(), exit_code=0, shm_leftovers=(("torch_42_a_0", 512),))
    job = {"pid": 42, "cmdline": ["python"], "start_time": None, "root_pid": 42}
    doc = check(_written(tmp_path / "e", facts, job=job, action="none (the job had already exited)", suffix="exit"))
    assert doc["mode"] == "exit" and doc["processes"] == [] and doc["timeline"] == []


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(extra_key=1),
        lambda d: d.update(schema_version=1),
        lambda d: d.update(mode="sleeping"),
        lambda d: d.pop("diagnoses"),
        lambda d: d["processes"][0]["stack"]["threads"][0].update(tid=1),
        lambda d: d["processes"][0]["stack"]["threads"][0]["frames"][0].pop("filename"),
        lambda d: d["processes"][0].update(state="sleeping"),
        lambda d: d["processes"][0].update(pid=1.5),
        lambda d: d["diagnoses"][0].update(confidence=1.5),
        lambda d: d["timeline"][0]["processes"][0]["threads"][0].append(0),
    ],
)
def test_the_schema_rejects_what_it_does_not_describe(tmp_path, change):
    doc = check(_written(tmp_path, _hang()))
    bad = copy.deepcopy(doc)
    change(bad)
    assert errors(bad)
