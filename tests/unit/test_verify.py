"""``dlwatch verify``'s judgement on hand-built runs: the fix as data (Fix, --fix), the runs'
bound, the count of batches over iterators, the Fisher p-value and the verdict's words."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest

from tests.unit.builders import proc, sample
from watchdog.commands import verify, verify_plan, verify_runs, verify_trust, verify_verdict
from watchdog.commands.verify_plan import CONTROL, FIXED, Origin, VerifyError
from watchdog.commands.verify_verdict import RunResult
from watchdog.types import ROLE_MAIN, Fix, LoaderView, ReportWritten


def _origin(**kw) -> Origin:
    base = dict(
        folder="/r/20261202T000000Z-1",
        mode="hang",
        kind="fork_inherited_lock",
        fix=Fix(loader=(("multiprocessing_context", "forkserver"),)),
        location="data.py:9",
        command=("python", "train.py"),
        cwd="/",
        uid=0,
        watched_by="run",
        sites=("/w/train.py:57",),
        failed_at_batch=37,
        batch_size=4,
        ran_s=30.0,
        settings={"stall_timeout_s": 6.0, "report_dir": "x", "on_hang_exec": "page me", "on_hang": "terminate"},
    )
    base.update(kw)
    return Origin(**base)


def loader_view(pid: int, iterator: int, batches: int) -> LoaderView:
    return LoaderView(
        pid=pid,
        iterator=iterator,
        kind="_MultiProcessingDataLoaderIter",
        site=None,
        settings=(("num_workers", 2), ("batch_size", 4)),
        dataset_type="DS",
        iterable=False,
        workers=(),
        worker_exitcodes=(),
        created=0.0,
        batches=batches,
        wait_s=0.0,
        epoch=0,
        first_batch_s=0.5,
        waiting_since=None,
        waiting_idx=0,
        waiting_worker=-1,
        last_batch=None,
        intervals=0,
        interval_p50_s=None,
        interval_p99_s=None,
    )


def _with(s, loaders):
    return dataclasses.replace(s, loaders=tuple(loaders))


def _run(variant: str, outcome: str, batches: int = 74, kind=None, applied=True, index: int = 1, rate=100.0):
    """A run; a failed one failed as the report did (fork_inherited_lock) unless ``kind`` says."""
    failed = outcome in ("hung", "crashed", "failed")
    kind = kind if kind is not None else "fork_inherited_lock" if failed else ""
    return RunResult(
        variant, index, outcome, kind, 0, batches, rate, 0.5, 10.0, applied if variant == FIXED else None, ()
    )


def _runs(n: int, control: str = "hung", fixed: str = "passed", **kw):
    return [
        r for i in range(1, n + 1) for r in (_run(CONTROL, control, 37, index=i, **kw), _run(FIXED, fixed, index=i))
    ]


def test_a_fix_goes_into_the_report_and_back_unchanged_and_refuses_settings_it_cannot_apply():
    fix = Fix(loader=(("timeout", 60.0),), sharing_strategy="file_system", env=(("OMP_NUM_THREADS", "1"),), nofile=4096)
    doc = fix.as_dict()
    assert doc == {
        "loader": {"timeout": 60.0},
        "sharing_strategy": "file_system",
        "env": {"OMP_NUM_THREADS": "1"},
        "rlimit_nofile": 4096,
    }
    assert Fix.from_dict(doc) == fix
    with pytest.raises(ValueError, match="batch_size"):
        Fix(loader=(("batch_size", 8),))
    with pytest.raises(ValueError, match="rlimit_nofile"):
        Fix.from_dict({"rlimit_nofile": "many"})
    assert "multiprocessing_context='spawn'" in Fix(loader=(("multiprocessing_context", "spawn"),)).describe()


def test_fix_flags_are_read_as_json_where_they_parse_and_an_unknown_key_names_the_flag():
    fix = verify_plan.parse_fix(
        ["num_workers=0", "pin_memory=false", "multiprocessing_context=spawn", "env.OMP_NUM_THREADS=1"]
    )
    assert dict(fix.loader) == {"num_workers": 0, "pin_memory": False, "multiprocessing_context": "spawn"}
    assert fix.env == (("OMP_NUM_THREADS", "1"),)
    with pytest.raises(VerifyError, match=r"--fix batch_size=8: unknown key 'batch_size'"):
        verify_plan.parse_fix(["batch_size=8"])
    with pytest.raises(VerifyError, match="KEY=VALUE"):
        verify_plan.parse_fix(["forkserver"])
    for bad in ("num_workers=abc", "num_workers=-1", "pin_memory=yes", "timeout=-5", "multiprocessing_context=bogus"):
        with pytest.raises(VerifyError, match=r"--fix: " + bad.split("=")[0]):
            verify_plan.parse_fix([bad])
    with pytest.raises(VerifyError, match="sharing_strategy='nope'"):
        verify_plan.parse_fix(["sharing_strategy=nope"])
    merged = Fix(loader=(("multiprocessing_context", "forkserver"),)).merged(verify_plan.parse_fix(["timeout=30"]))
    assert dict(merged.loader) == {"multiprocessing_context": "forkserver", "timeout": 30}


def test_runs_go_twice_as_far_as_the_original_at_least_fifty_batches_or_by_time_without_an_inside_view():
    assert verify_plan.bound_of(_origin(failed_at_batch=37), None, None) == (74, None)
    assert verify_plan.bound_of(_origin(failed_at_batch=3), None, None) == (verify_plan.MIN_BATCHES, None)
    assert verify_plan.bound_of(_origin(failed_at_batch=None, ran_s=100.0), None, None) == (None, 200.0)
    assert verify_plan.bound_of(_origin(), 10, None) == (10, None)


def test_the_runs_alternate_and_only_the_fixed_ones_get_the_fix_and_no_alert_fires():
    runs = verify_plan.plan(_origin(), Fix(loader=(("multiprocessing_context", "spawn"),)), 2, (74, None), False)
    assert [(v, i) for v, i, _, _ in runs] == [(CONTROL, 1), (FIXED, 1), (CONTROL, 2), (FIXED, 2)]
    assert all("DLWATCH_APPLY" not in env for v, _, _, env in runs if v == CONTROL)
    assert '"spawn"' in runs[1][3]["DLWATCH_APPLY"] and "/w/train.py:57" in runs[1][3]["DLWATCH_APPLY"]
    assert runs[0][2] == ["--stop-after-batches", "74"]
    origin = _origin(settings={**_origin().settings, "py_spy": {"path": "/tmp/evil", "timeout_s": 5.0}})
    settings = verify_plan.settings_for_runs(origin)
    assert "on_hang_exec" not in settings and "report_dir" not in settings and settings["on_hang"] == "report"
    assert settings["py_spy"] == {"timeout_s": 5.0} and settings["stall_timeout_s"] == 6.0  # never the report's binary


def test_batches_are_counted_over_every_iterator_of_main_and_a_hang_report_ends_the_run():
    bound = verify_runs.RunBound(10, None, started=0.0)
    base = sample(1.0, [proc(1, ROLE_MAIN, [])])
    for batches in (3, 6):  # epoch 1's iterator, sampled twice
        bound.note(_with(base, [loader_view(1, iterator=1, batches=batches)]))
    assert bound.delivered == 6 and bound.reached(1.0) is None and bound.batch_size == 4
    bound.note(_with(base, [loader_view(1, iterator=2, batches=4), loader_view(2, iterator=1, batches=50)]))
    assert bound.delivered == 10 and bound.reached(1.0) == "batches"  # another process's loader does not count
    timed = verify_runs.RunBound(None, 5.0, started=0.0)
    assert timed.reached(4.0) is None and timed.reached(5.0) == "seconds"
    timed.reported(ReportWritten("warning", "cpu_oversubscribed"))
    assert timed.reached(1.0) is None
    timed.reported(ReportWritten("hang", "worker_stuck"))
    assert timed.reached(1.0) == "hung"


def test_fishers_one_sided_p_value_matches_the_hypergeometric_tail():
    assert verify_verdict.fisher_one_sided(5, 5, 0, 5) == pytest.approx(1 / math.comb(10, 5))
    assert verify_verdict.fisher_one_sided(3, 10, 0, 10) == pytest.approx(math.comb(17, 10) / math.comb(20, 10))
    assert verify_verdict.fisher_one_sided(2, 4, 2, 4) > 0.5


def test_the_fix_holds_when_every_control_hung_and_every_fixed_run_passed_the_hang_point():
    v = verify_verdict.verdict(_origin(), _origin().fix, _runs(3))
    assert v.holds and v.p_value == pytest.approx(1 / 64)
    assert v.line.startswith(
        "the fix holds (one-sided p=0.016): with multiprocessing_context='forkserver' 3/3 run(s) passed batch 74"
    )
    assert "(the original hung at batch 37)" in v.line and "unchanged 3/3 hung (fork_inherited_lock)" in v.line
    assert v.change == 'DataLoader(..., multiprocessing_context="forkserver") for the loader iterated at /w/train.py:57'


def test_a_control_that_did_not_fail_proves_nothing_and_says_to_run_more():
    v = verify_verdict.verdict(_origin(), _origin().fix, [_run(CONTROL, "passed"), _run(FIXED, "passed")])
    assert not v.holds and v.line.startswith(
        "not proven: the control did not hang as the report did (fork_inherited_lock) in 1 run(s)"
    )
    assert "--runs 10" in v.line and v.change is None


def test_one_failed_control_and_one_passing_fixed_run_prove_nothing_and_say_the_runs_needed():
    v = verify_verdict.verdict(_origin(), _origin().fix, _runs(1))  # the no-op fix "proven" by one lucky run
    assert not v.holds and v.change is None and v.p_value == pytest.approx(0.25)
    assert "not proven (one-sided p=0.250, needs p < 0.05)" in v.line and "--runs 3 would prove it" in v.line
    v = verify_verdict.verdict(_origin(), _origin().fix, _runs(2))
    assert not v.holds and v.p_value == pytest.approx(1 / 16)


def test_a_control_that_failed_otherwise_is_not_the_reports_failure():
    results = _runs(3, kind="worker_stuck")  # every control hung, but not as the report did
    v = verify_verdict.verdict(_origin(), _origin().fix, results)
    assert not v.holds and "did not hang as the report did (fork_inherited_lock)" in v.line
    assert "it failed otherwise (worker_stuck)" in v.line


def test_boschloos_p_value_matches_scipys_and_is_never_above_fishers():
    # Reference values from scipy.stats.boschloo_exact([[cf, ff], [cn - cf, fn - ff]], alternative="greater").
    for (cf, cn, ff, fn), expected in {
        (3, 3, 0, 3): 0.015625,
        (2, 2, 0, 2): 0.0625,
        (1, 1, 0, 1): 0.25,
        (2, 3, 0, 2): 0.12871,
        (4, 5, 0, 4): 0.01203,
        (2, 4, 0, 8): 0.0418,
        (1, 1, 3, 4): 0.53499,
        (5, 5, 1, 2): 0.14663,
    }.items():
        p = verify_verdict.boschloo_one_sided(cf, cn, ff, fn)
        assert p == pytest.approx(expected, abs=2e-5), (cf, cn, ff, fn)
        assert p <= verify_verdict.fisher_one_sided(cf, cn, ff, fn) + 1e-12
    assert [verify_verdict.runs_needed(c, n) for c, n in [(1, 1), (1, 2), (3, 10), (0, 5)]] == [3, 6, 14, None]


def test_a_no_op_fix_of_a_job_that_fails_half_the_time_never_holds():
    import random

    rng = random.Random(20261205)
    held = 0
    for _ in range(500):  # the fix changes nothing: every run fails with probability 1/2
        n = rng.choice([1, 2, 3, 5, 10])
        runs = [
            _run(v, "hung" if rng.random() < 0.5 else "passed", 37, index=i)
            for i in range(1, n + 1)
            for v in (CONTROL, FIXED)
        ]
        held += verify_verdict.verdict(_origin(), _origin().fix, runs).holds
    assert held <= 500 * verify_plan.ALPHA  # the test's size is at most alpha (the code before held 35 of 500)


def test_a_fixed_run_that_still_hangs_means_the_fix_does_not_hold():
    results = [_run(CONTROL, "hung", 37, "worker_stuck"), _run(FIXED, "hung", 36, "worker_stuck")]
    results = [dataclasses.replace(r, kind="worker_stuck") for r in results]
    v = verify_verdict.verdict(_origin(kind="worker_stuck"), _origin().fix, results)
    assert not v.holds and v.line.startswith("the fix does not hold") and "1 failed (worker_stuck)" in v.line
    assert "fails otherwise" not in v.line
    crashed = dataclasses.replace(_run(FIXED, "crashed", 0, "worker_start_failed"), reports=("/r/v/fixed-1/x-crash",))
    v = verify_verdict.verdict(_origin(kind="worker_stuck"), _origin().fix, [results[0], crashed])
    assert (
        "the fix itself fails otherwise (worker_start_failed): read that run's report (/r/v/fixed-1/x-crash)" in v.line
    )


def test_a_fix_of_no_workers_is_seen_applied_without_a_start_method():
    fix = Fix(loader=(("multiprocessing_context", "forkserver"), ("num_workers", 0)))
    seen = {"loader_settings": {"num_workers": 0, "multiprocessing_context": None, "prefetch_factor": None}}
    assert verify_verdict.fix_applied(fix, FIXED, seen) is True


def test_a_workers_thread_fix_is_parsed_carried_checked_and_seen_applied_only_where_the_recorder_saw_it():
    fix = verify_plan.parse_fix(["worker_threads=1", "env.OMP_NUM_THREADS=1"])
    assert fix.worker_threads == 1 and Fix.from_dict(fix.as_dict()) == fix
    assert fix.as_dict()["worker_threads"] == 1
    assert fix.describe() == "OMP_NUM_THREADS=1, torch.set_num_threads(1) in each worker"
    for bad in ("worker_threads=0", "worker_threads=two", "worker_threads=true"):
        with pytest.raises(VerifyError, match=r"worker_threads"):
            verify_plan.parse_fix([bad])
    with pytest.raises(ValueError, match="worker_threads"):
        verify_plan.check_counts(Fix(worker_threads=5000), "remedy_apply")
    plans = verify_plan.plan(_origin(), Fix(worker_threads=1), 1, (74, None), False)
    assert "DLWATCH_APPLY" not in plans[0][3] and json.loads(plans[1][3]["DLWATCH_APPLY"])["worker_threads"] == 1
    seen = {"loader_settings": {"num_workers": 4, "worker_init_fn": "threads", "worker_threads": 1}}
    assert verify_verdict.fix_applied(Fix(worker_threads=1), FIXED, seen) is True
    del seen["loader_settings"]["worker_threads"]
    assert verify_verdict.fix_applied(Fix(worker_threads=1), FIXED, seen) is False
    assert "torch.set_num_threads(1) at the end of the worker_init_fn" in verify_verdict.change_of(
        Fix(worker_threads=1), _origin()
    )


def test_a_healthy_command_given_instead_is_not_called_flaky():
    v = verify_verdict.verdict(
        _origin(), _origin().fix, [_run(CONTROL, "passed"), _run(FIXED, "passed")], own_command=True
    )
    assert "flaky" not in v.line and "not the report's" in v.line


def test_a_fix_the_recorder_did_not_see_applied_proves_nothing():
    results = [_run(CONTROL, "hung", 37), _run(FIXED, "passed", applied=False)]
    v = verify_verdict.verdict(_origin(), _origin().fix, results)
    assert not v.holds and "was not seen applied" in v.line and "--all-loaders" in v.line


def test_a_flaky_control_gets_the_counts_and_a_p_value():
    control = [_run(CONTROL, "hung" if i < 3 else "passed", index=i) for i in range(10)]
    fixed = [_run(FIXED, "passed", index=i) for i in range(10)]
    v = verify_verdict.verdict(_origin(), _origin().fix, control + fixed)
    assert not v.holds and "p=0.058" in v.line and "unchanged 3/10 hung" in v.line and "--runs 14" in v.line
    control = [_run(CONTROL, "hung" if i < 8 else "passed", index=i) for i in range(10)]
    v = verify_verdict.verdict(_origin(), _origin().fix, control + fixed)
    assert v.holds and "one-sided p=<0.001" in v.line


def test_the_cost_needs_three_runs_of_each_and_shows_the_spread():
    assert verify_verdict.cost_line([_run(CONTROL, "passed", rate=42.0), _run(FIXED, "passed", rate=91.0)]) is None
    hung = [_run(CONTROL, "hung", rate=5.3, index=i) for i in range(3)]  # a hung run's rate measures the hang
    assert verify_verdict.cost_line(hung + [_run(FIXED, "passed", rate=88.5, index=i) for i in range(3)]) is None
    noisy = [_run(CONTROL, "passed", rate=r, index=i) for i, r in enumerate((42.0, 95.0, 60.0))]
    noisy += [_run(FIXED, "passed", rate=r, index=i) for i, r in enumerate((91.0, 50.0, 70.0))]
    line = verify_verdict.cost_line(noisy)
    assert "samples/s 60 (42–95) unchanged, 70 (50–91) with the fix (ranges overlap" in line and "x)" not in line
    apart = [_run(CONTROL, "passed", rate=r, index=i) for i, r in enumerate((40.0, 42.0, 44.0))]
    apart += [_run(FIXED, "passed", rate=r, index=i) for i, r in enumerate((80.0, 84.0, 88.0))]
    assert "(2.00x)" in verify_verdict.cost_line(apart)


def test_a_run_is_judged_from_its_summary_and_reports():
    hang = {"mode": "hang", "diagnoses": [{"kind": "worker_stuck"}]}
    crash = {"mode": "crash", "diagnoses": [{"kind": "dataset_error"}]}
    assert verify_verdict.outcome_of({"stopped": "hung", "hung": "worker_stuck"}, [hang]) == ("hung", "worker_stuck")
    assert verify_verdict.outcome_of({"stopped": "batches", "exit_code": 143}, []) == ("passed", "")
    assert verify_verdict.outcome_of({"stopped": None, "exit_code": 0}, []) == ("ended", "")
    assert verify_verdict.outcome_of({"stopped": None, "exit_code": 1}, [crash]) == ("crashed", "dataset_error")
    assert verify_verdict.outcome_of(None, []) == ("failed", "")
    seen = {"loader_settings": {"multiprocessing_context": "forkserver"}}
    assert verify_verdict.fix_applied(_origin().fix, FIXED, seen) is True
    assert (
        verify_verdict.fix_applied(_origin().fix, FIXED, {"loader_settings": {"multiprocessing_context": "fork"}})
        is False
    )
    assert verify_verdict.fix_applied(Fix(sharing_strategy="file_system"), FIXED, seen) is None


def test_a_job_that_cannot_be_rerun_as_it_ran_is_refused_with_the_reason(tmp_path):
    with pytest.raises(VerifyError, match="redacted"):
        verify_trust.check_rerunnable(_origin(cwd=str(tmp_path)), ["python", "train.py", "--token=<redacted>"], False)
    with pytest.raises(VerifyError, match="uid 12345"):
        verify_trust.check_rerunnable(_origin(cwd=str(tmp_path), uid=12345), ["python"], False)
    with pytest.raises(VerifyError, match="--yes"):
        verify_trust.check_rerunnable(_origin(cwd=str(tmp_path), uid=None, watched_by="attach"), ["python"], False)
    verify_trust.check_rerunnable(_origin(cwd=str(tmp_path), uid=None, watched_by="attach"), ["python"], True)
    with pytest.raises(VerifyError, match="pass it after --"):
        verify_trust.check_rerunnable(_origin(cwd=str(tmp_path)), [], False)


def _kinds_declaring_a_fix():
    import ast
    import glob
    import os

    from tests.unit.builders import ROOT

    kinds = set()
    for path in glob.glob(os.path.join(ROOT, "watchdog", "diagnose", "**", "*.py"), recursive=True):
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if not isinstance(node, ast.FunctionDef):
                continue
            kind = next(
                (
                    d.args[0].value
                    for d in node.decorator_list
                    if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "rule" and d.args
                ),
                None,
            )
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            keywords = {k.arg for n in ast.walk(node) if isinstance(n, ast.Call) for k in n.keywords}
            if kind and ("fix" in keywords or names & {"Fix", "FORKSERVER", "SPAWN"}):
                kinds.add(kind)
    return kinds


def test_every_kind_that_declares_a_fix_has_a_scenario_that_proves_it():
    from probes import cases, repro
    from watchdog.commands import throughput_ab

    # a change proven by throughput (input_bound): tests/real/test_verify_throughput.py proves it
    assert _kinds_declaring_a_fix() == set(cases.FIX_PROOFS) | throughput_ab.KINDS
    for kind, names in cases.FIX_PROOFS.items():
        for name in names:
            scenario = repro.CASE_SCENARIOS.get(name) or repro.BY_NAME[name]
            assert scenario.expected == kind, (name, scenario.expected)


def _report_folder(tmp_path, doc=None, name="20261202T000000Z-1"):
    folder = tmp_path / name
    folder.mkdir(mode=0o700)
    (folder / "report.json").write_text(json.dumps(doc if doc is not None else {"mode": "hang"}))
    os.chmod(folder / "report.json", 0o600)
    return str(folder)


def test_a_report_that_is_a_link_a_fifo_or_writable_by_others_is_not_trusted_to_say_what_to_run(tmp_path):
    folder = _report_folder(tmp_path)
    os.chmod(folder, 0o777)
    with pytest.raises(VerifyError, match="writable by others"):
        verify_trust.read_report(folder)
    os.chmod(folder, 0o700)
    os.rename(os.path.join(folder, "report.json"), os.path.join(folder, "real.json"))
    os.symlink(os.path.join(folder, "real.json"), os.path.join(folder, "report.json"))
    with pytest.raises(VerifyError, match="a link is refused"):
        verify_trust.read_report(folder)
    os.unlink(os.path.join(folder, "report.json"))
    os.mkfifo(os.path.join(folder, "report.json"), 0o600)
    with pytest.raises(VerifyError, match="not a regular file"):
        verify_trust.read_report(folder)  # and it did not block on the FIFO
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(VerifyError, match="symbolic link"):
        verify_trust.read_report(str(link))


def test_a_malformed_report_is_one_line_naming_the_field(tmp_path):
    doc = {"mode": "hang", "diagnoses": [{"kind": "worker_stuck"}], "job": {"launch": {"command": "python x.py"}}}
    with pytest.raises(VerifyError, match="malformed: job.launch.command is not a list"):
        verify_trust.origin_of(_report_folder(tmp_path, doc))
    doc["job"]["launch"]["command"] = ["py\0thon"]
    with pytest.raises(VerifyError, match="NUL"):
        verify_trust.origin_of(_report_folder(tmp_path / "b" if (tmp_path / "b").mkdir() is None else tmp_path, doc))
    with pytest.raises(VerifyError, match="remedy_apply"):
        bad = {"mode": "hang", "diagnoses": [{"kind": "k", "remedy_apply": 5}]}
        verify_trust.origin_of(_report_folder(tmp_path / "c" if (tmp_path / "c").mkdir() is None else tmp_path, bad))


def test_the_verify_folder_is_never_made_where_another_user_could_move_it(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    folder = shared / "20261202T000000Z-1"
    folder.mkdir()
    with pytest.raises(VerifyError, match="another user could move or replace"):
        verify_trust.verify_folder(str(folder))
    os.chmod(shared, 0o1777)  # sticky, as /tmp: others cannot rename what is ours
    made = verify_trust.verify_folder(str(folder))
    assert os.path.basename(made).startswith("verify-") and oct(os.stat(made).st_mode & 0o777) == "0o700"
    assert verify_trust.verify_folder(str(folder)) != made  # a folder made first by anyone is never reused


def test_secret_named_variables_of_a_fix_are_redacted_where_they_are_shown():
    shown = verify_plan.fix_as_shown(
        verify_plan.parse_fix(["env.AWS_SECRET_ACCESS_KEY=abcd1234abcd1234abcd1234", "env.OMP_NUM_THREADS=1"])
    )
    assert dict(shown.env) == {"AWS_SECRET_ACCESS_KEY": "<redacted>", "OMP_NUM_THREADS": "1"}
    assert "abcd1234" not in shown.describe()


def _job_folder(tmp_path, mode=0o755):
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("print('train')\n")
    os.chmod(job / "train.py", 0o644)
    os.chmod(job, mode)
    return job


def test_a_working_directory_or_command_file_another_user_can_change_is_refused(tmp_path):
    os.chmod(tmp_path, 0o755)
    job = _job_folder(tmp_path)
    cwd = verify_trust.check_rerunnable(_origin(cwd=str(job), uid=None), ["python", "train.py"], False)
    assert cwd == os.path.realpath(job)
    os.chmod(job, 0o1777)  # sticky and world-writable, as /tmp: anyone can drop a json.py there
    with pytest.raises(VerifyError, match="writable by others"):
        verify_trust.check_rerunnable(_origin(cwd=str(job), uid=None), ["python", "train.py"], False)
    os.chmod(job, 0o775)  # group-writable counts too
    with pytest.raises(VerifyError, match="writable by others"):
        verify_trust.check_rerunnable(_origin(cwd=str(job), uid=None), ["python", "train.py"], False)
    os.chmod(job, 0o755)
    os.chmod(job / "train.py", 0o666)  # the script itself
    with pytest.raises(VerifyError, match="the command's file 'train.py'"):
        verify_trust.check_rerunnable(_origin(cwd=str(job), uid=None), ["python", "train.py"], False)
    os.chmod(job / "train.py", 0o644)
    os.chmod(tmp_path, 0o777)  # a folder above it where others can rename the job's folder
    with pytest.raises(VerifyError, match="writable by others"):
        verify_trust.check_rerunnable(_origin(cwd=str(job), uid=None), ["python", "train.py"], False)
    os.chmod(tmp_path, 0o1777)  # ... unless it is sticky: then they cannot
    assert verify_trust.check_rerunnable(_origin(cwd=str(job), uid=None), ["python", "train.py"], False)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a folder to another uid (needs root)")
def test_a_working_directory_of_another_user_is_refused(tmp_path):
    os.chmod(tmp_path, 0o755)
    job = _job_folder(tmp_path)
    os.chown(job, 65534, 65534)  # nobody's, as a folder re-made by another user
    with pytest.raises(VerifyError, match="belongs to uid 65534"):
        verify_trust.check_rerunnable(_origin(cwd=str(job), uid=None), ["python", "train.py"], False)


def test_a_job_started_as_another_user_is_refused(tmp_path):
    os.chmod(tmp_path, 0o755)
    job = _job_folder(tmp_path)
    for changer in ("runuser", "/usr/sbin/runuser", "sudo", "setpriv"):
        with pytest.raises(VerifyError, match="as another user"):
            verify_trust.check_rerunnable(_origin(cwd=str(job), uid=None), [changer, "-u", "bob", "python"], False)


def test_each_run_starts_dlwatch_isolated_from_the_jobs_folder_and_pythonpath():
    argv = verify_runs.run_argv(
        "/v/settings.yaml", "/v/fixed-1", ["--stop-after-batches", "50"], ["python", "train.py"]
    )
    assert argv[:5] == [__import__("sys").executable, "-I", "-m", "watchdog", "run"]
    assert argv[-3:] == ["--", "python", "train.py"] and "/v/fixed-1/run-summary.json" in argv


def test_a_reports_fix_may_set_only_variables_that_name_no_code(tmp_path):
    import argparse

    os.chmod(tmp_path, 0o755)
    job = _job_folder(tmp_path)
    doc = {
        "mode": "hang",
        "diagnoses": [{"kind": "worker_stuck", "remedy_apply": {"env": {"LD_PRELOAD": "/tmp/evil.so"}}}],
        "job": {
            "launch": {"command": ["python", "train.py"], "cwd": str(job), "uid": os.getuid(), "watched_by": "run"}
        },
    }
    reports = tmp_path / "reports"
    reports.mkdir(mode=0o700)
    folder = _report_folder(reports, doc)
    args = argparse.Namespace(
        report=folder, last=None, report_dir="", fix=[], only=False, all_loaders=True, cmd=[], yes=False,
        batches=None, seconds=5.0, runs=1, dry_run=True, json=None, max_run_s=60.0,
    )  # fmt: skip
    with pytest.raises(VerifyError, match="sets LD_PRELOAD, which verify never takes from a file"):
        verify.cmd_verify(args, say=lambda *_: None)
    said = []  # the caller may set it on purpose; the dry run then shows the real argv
    args.only, args.fix = True, ["env.LD_PRELOAD=/opt/mine.so"]
    assert verify.cmd_verify(args, say=said.append) == 0
    runs = [x for x in said if x.startswith("fixed 1")]
    assert runs and "LD_PRELOAD=/opt/mine.so" in runs[0] and " -I -m watchdog run " in runs[0]


def test_a_run_that_failed_by_itself_before_its_first_batch_is_said_as_such_not_blamed_on_the_fix():
    early = dataclasses.replace(
        _run(FIXED, "crashed", 0, kind="exit code 1", applied=False), error="FileNotFoundError: data/train.bin"
    )
    v = verify_verdict.verdict(_origin(), _origin().fix, [_run(CONTROL, "hung", 37), early])
    assert not v.holds and "fixed run 1 failed by itself before its first batch" in v.line
    assert "FileNotFoundError: data/train.bin" in v.line and "--all-loaders" not in v.line


def test_what_a_start_had_is_read_from_proc_for_a_real_process():
    import subprocess
    import sys

    from watchdog.collect import launch

    code = "import time; time.sleep(30)"
    with open(os.devnull, "rb") as null, open(__file__, "rb") as a_file:
        for stdin, kind in ((null, "null"), (a_file, "file"), (subprocess.PIPE, "pipe")):
            proc = subprocess.Popen([sys.executable, "-c", code], stdin=stdin)
            try:
                assert launch.stdin_kind(proc.pid) == kind
                assert launch.mount_ns(proc.pid) == launch.mount_ns() and launch.mount_ns().startswith("mnt:[")
                assert launch.cgroup(proc.pid) == launch.cgroup()
            finally:
                proc.kill()
                proc.wait()
    assert launch.context(2**22 + 1) == ("", "", "")  # no such process: unknown, never an error


def test_a_start_verify_cannot_reproduce_is_refused_or_said_before_any_run(tmp_path):
    from watchdog.collect import launch

    os.chmod(tmp_path, 0o755)
    job = _job_folder(tmp_path)
    piped = _origin(cwd=str(job), uid=None, stdin="pipe")
    with pytest.raises(VerifyError, match="standard input from a pipe"):
        verify_trust.check_rerunnable(piped, ["python", "train.py"], False)
    assert verify_trust.check_rerunnable(piped, ["python", "train.py"], True)
    elsewhere = _origin(cwd=str(job), uid=None, mount_ns="mnt:[1]")
    with pytest.raises(VerifyError, match="another mount namespace"):
        verify_trust.check_rerunnable(elsewhere, ["python", "train.py"], False)
    same = _origin(cwd=str(job), uid=None, mount_ns=launch.mount_ns(), cgroup=launch.cgroup(), stdin="null")
    assert verify_trust.check_rerunnable(same, ["python", "train.py"], False) and verify_trust.differences(same) == []
    said = verify_trust.differences(_origin(stdin="terminal", cgroup="/other.slice/job"))
    assert said[0] == "note: the original had a terminal on stdin; the runs get /dev/null"
    assert "cgroup /other.slice/job" in said[1] and "memory and pids limits may differ" in said[1]


def test_the_prove_line_carries_the_flags_verify_needs_for_that_report():
    from watchdog.report import rendering

    doc = {
        "diagnoses": [{"remedy_apply": {"loader": {"multiprocessing_context": "forkserver"}}}],
        "job": {"pid": 7, "launch": {"watched_by": "attach", "stdin": "null"}},
        "inside_view": {"loaders": []},
    }
    assert rendering.verify_flags(doc) == ["--all-loaders", "--yes"]  # attach without the inside view
    doc["job"]["launch"]["watched_by"] = "run"
    doc["inside_view"]["loaders"] = [{"pid": 7, "site": {"file": "train.py", "line": 3}}]
    assert rendering.verify_flags(doc) == []
    doc["job"]["launch"]["stdin"] = "pipe"
    assert rendering.verify_flags(doc) == ["--yes"]


def test_last_takes_the_newest_report_of_a_kind_and_says_which(tmp_path):
    import argparse

    os.chmod(tmp_path, 0o755)
    job = _job_folder(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir(mode=0o700)
    launch = {"command": ["python", "train.py"], "cwd": str(job), "uid": os.getuid(), "watched_by": "run"}
    for name, kind in (("20261201T000000Z-1", "fork_inherited_lock"), ("20261202T000000Z-2", "fd_exhausted")):
        fix = {"loader": {"multiprocessing_context": "forkserver"}} if kind == "fork_inherited_lock" else None
        doc = {"mode": "hang", "diagnoses": [{"kind": kind, "remedy_apply": fix}], "job": {"launch": launch}}
        _report_folder(reports, doc, name=name)
    args = argparse.Namespace(
        report=None, last="fork_inherited_lock", report_dir=str(reports), fix=[], only=False, all_loaders=True,
        cmd=[], yes=False, batches=None, seconds=5.0, runs=1, dry_run=True, json=None, max_run_s=60.0,
    )  # fmt: skip
    said = []
    assert verify.cmd_verify(args, say=said.append) == 0
    line = next(x for x in said if x.startswith("report: "))
    assert "20261201T000000Z-1 (fork_inherited_lock, hang) (--last fork_inherited_lock: the newest of 1)" in line
    args.last = "shm_exhausted"
    with pytest.raises(VerifyError, match="no report of kind shm_exhausted there"):
        verify.cmd_verify(args, say=said.append)


def test_a_start_method_fix_for_a_loop_at_the_top_level_without_a_main_guard_is_refused_before_any_run(tmp_path):
    bare = tmp_path / "bare.py"
    bare.write_text("import torch\nloader = make()\nfor batch in loader:\n    step(batch)\n")
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "import torch\nif __name__ == '__main__':\n    loader = make()\n    for batch in loader:\n        pass\n"
    )
    forkserver = Fix(loader=(("multiprocessing_context", "forkserver"),))
    origin = _origin(sites=(f"{bare}:3",), module_sites=(f"{bare}:3",))
    why = verify_trust.fix_cannot_apply(origin, forkserver)
    assert why and f"top level of {bare}:3" in why and "worker_init_fn" in why
    assert verify_trust.fix_cannot_apply(origin, Fix(loader=(("num_workers", 0),))) is None  # no re-import: it can
    assert verify_trust.fix_cannot_apply(_origin(module_sites=(f"{guarded}:4",)), forkserver) is None
    assert verify_trust.fix_cannot_apply(_origin(module_sites=()), forkserver) is None  # in a function: main()
    assert verify_trust.fix_cannot_apply(_origin(module_sites=(f"{tmp_path}/gone.py:3",)), forkserver) is None


def test_a_report_from_before_the_rename_gives_its_memory_read_interval_to_the_runs_and_never_its_alerts():
    old = _origin(settings={"full_info_interval_s": 2.0, "on_hang_exec": "page me", "exec_timeout_s": 5.0})
    settings = verify_plan.settings_for_runs(old)
    assert settings["memory_read_base_interval_s"] == 2.0 and "full_info_interval_s" not in settings
    new = _origin(settings={"memory_read_base_interval_s": 3.0, "alerts": {"on_hang_exec": "page me"}})
    settings = verify_plan.settings_for_runs(new)
    assert settings["memory_read_base_interval_s"] == 3.0
    assert "alerts" not in settings and "on_hang_exec" not in settings


def _suspected(index: int, kind: str = "unknown", certainty: str = "suspected", outcome: str = "hung"):
    """A fixed run that ended in a hang report of ``kind`` with that ``certainty``."""
    return dataclasses.replace(
        _run(FIXED, outcome, 16, kind, index=index), certainty=certainty, reports=(f"/r/v/fixed-{index}/x-hang",)
    )


def test_a_fixed_run_ended_by_a_suspected_stall_of_another_kind_is_inconclusive_never_a_failed_fix():
    # The first user's trial (the README demo's verify on a loaded machine): control 3/3
    # fork_inherited_lock; fixed runs 2 ended, 1 a 6 s suspected stall of kind unknown (its
    # workers still starting). The code before said "the fix does not hold ... 1 failed (unknown)".
    control = [_run(CONTROL, "hung", 0, index=i) for i in (1, 2, 3)]
    fixed = [_run(FIXED, "ended", 48, index=1), _suspected(2), _run(FIXED, "ended", 48, index=3)]
    v = verify_verdict.verdict(_origin(), _origin().fix, control + fixed)
    assert "does not hold" not in v.line and v.line.startswith("the fix holds (one-sided p=0.035)")
    assert "2/3 run(s) ran to their end" in v.line
    assert "1 fixed run(s) inconclusive: a suspected stall of another kind (unknown)" in v.line
    assert "(its report: /r/v/fixed-2/x-hang)" in v.line
    # one run fewer in the test: 3/3 against 0/2
    assert v.holds and v.p_value == pytest.approx(verify_verdict.boschloo_one_sided(3, 3, 0, 2))
    # two controls against one judged fixed run prove nothing, and say so without blaming the fix
    v = verify_verdict.verdict(_origin(), _origin().fix, control[:2] + fixed[:2])
    assert not v.holds and v.line.startswith("not proven (one-sided p=") and "inconclusive" in v.line
    assert "suspected" in verify_verdict.table(control + fixed) and "hung (unknown, suspected)" in verify_verdict.table(
        fixed
    )


def test_a_fixed_run_that_fails_as_the_report_did_or_proven_or_crashed_still_means_the_fix_does_not_hold():
    control = [_run(CONTROL, "hung", 0, index=i) for i in (1, 2, 3)]
    ended = [_run(FIXED, "ended", 48, index=i) for i in (1, 2)]
    for failed in (
        _suspected(3, kind="fork_inherited_lock"),  # the report's own kind, suspected
        _suspected(3, certainty="proven"),  # another kind, but proven
        _suspected(3, certainty=""),  # a hang whose report says no certainty
        _suspected(3, kind="worker_start_failed", certainty="", outcome="crashed"),
    ):
        v = verify_verdict.verdict(_origin(), _origin().fix, control + ended + [failed])
        assert v.line.startswith("the fix does not hold") and "inconclusive" not in v.line, failed
    # a suspected stall of another kind in the control is no failure as the report did either
    v = verify_verdict.verdict(
        _origin(), _origin().fix, [dataclasses.replace(_run(CONTROL, "hung", 0, "unknown"))] + ended[:1]
    )
    assert "did not hang as the report did" in v.line


def test_fixed_runs_that_were_all_inconclusive_prove_nothing():
    control = [_run(CONTROL, "hung", 0, index=i) for i in (1, 2, 3)]
    v = verify_verdict.verdict(_origin(), _origin().fix, control + [_suspected(i) for i in (1, 2, 3)])
    assert not v.holds and v.line.startswith("not proven") and "no fixed run could be judged" in v.line
    assert "does not hold" not in v.line


def test_a_hang_reports_certainty_is_read_from_its_stall():
    proven = {"mode": "hang", "diagnoses": [{"kind": "x"}], "stall": {"certainty": "proven"}}
    suspected = {"mode": "hang", "diagnoses": [{"kind": "unknown"}], "stall": {"certainty": "suspected"}}
    warning = {"mode": "live", "diagnoses": [{"kind": "input_bound"}], "stall": None}
    assert verify_verdict.certainty_of([warning, suspected]) == "suspected"
    assert verify_verdict.certainty_of([proven]) == "proven"
    assert verify_verdict.certainty_of([warning, {"mode": "hang", "stall": {"certainty": 3}}]) == ""


# What a module that does I/O imports or calls: files, processes, signals, limits, clocks.
_IO_MODULES = {"os", "subprocess", "signal", "resource", "shutil", "tempfile", "time", "socket", "pwd", "stat"}
_IO_CALLS = {"open", "print", "input"}


def _io_in(source: str) -> list:
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in _IO_MODULES]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in _IO_MODULES:
            found.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in ("verify_runs", "verify_trust"):
            found.append(node.module)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _IO_CALLS:
            found.append(node.func.id + "()")
    return found


def test_the_plan_and_the_verdict_are_pure():
    """verify's plan and verdict read no file, start nothing and import neither its runner nor
    its trust checks: they are judged on hand-built runs, as here."""
    for module in (verify_plan, verify_verdict):
        with open(module.__file__, encoding="utf-8") as f:
            assert _io_in(f.read()) == [], module.__name__
    assert _io_in("import os\nfrom .verify_runs import run_one\nopen('x')\n") == ["os", "verify_runs", "open()"]
