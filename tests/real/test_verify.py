"""``dlwatch verify`` on real jobs: a case from ``probes/cases`` runs under ``dlwatch run`` and
gets its report; ``verify`` then re-runs it unchanged and with the report's fix, applied by
the job's recorder (``watchdog/bootstrap/_dlwatch_fix.py``) with no edit to the case, and must
say whether the fix holds. Every run is bounded and every process group is killed
(``helpers.run_bounded``)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from probes import cases, repro
from tests.real.helpers import DLWATCH, PY, ROOT, kill_tree, load_report, plant_report, reports, run_bounded
from watchdog.collect import inside
from watchdog.types import Fix


def _report_of(case: str, tmp_path, *flags: str) -> str:
    """Run ``probes.cases.<case>`` under ``dlwatch run`` (5 s stall timeout) and return its
    first hang or crash report folder."""
    out = tmp_path / "reports"
    code, _, err = run_bounded(
        DLWATCH
        + ["run", "--report-dir", str(out), "--stall-timeout", "5", *flags, "--", PY, "-m", f"probes.cases.{case}"],
        timeout_s=180,
    )
    found = [f for f in reports(str(out)) if load_report(f)["mode"] in ("hang", "crash")]
    assert found, (code, err[-3000:])
    return found[0]


def _verify(folder: str, *args: str, timeout_s: float = 400):
    return run_bounded(DLWATCH + ["verify", folder, *args], timeout_s=timeout_s)


_PROOFS = [(kind, name) for kind, names in cases.FIX_PROOFS.items() for name in names]


@pytest.mark.timeout(1200)  # three runs of each variant (the fewest that can prove a fix), each bounded
@pytest.mark.parametrize("kind, name", _PROOFS, ids=[n for _, n in _PROOFS])
def test_each_declared_fix_is_proven_on_the_job_itself(kind, name, tmp_path):
    scenario = repro.CASE_SCENARIOS.get(name) or repro.BY_NAME[name]
    outcome = repro.run_scenario(scenario, str(tmp_path / "run"))
    if outcome.status == "skipped":
        pytest.skip(outcome.note)
    assert outcome.status == "ok" and outcome.first == kind and outcome.report, outcome
    folder = outcome.report
    doc = load_report(folder)
    assert doc["diagnoses"][0]["remedy_apply"], doc["diagnoses"][0]
    assert f"prove:  dlwatch verify {folder}" in open(os.path.join(folder, "report.txt")).read()
    result, line = repro.verify_report(folder, str(tmp_path))  # what `dlwatch probe repro --verify` runs
    assert result == "holds", line
    described = Fix.from_dict(doc["diagnoses"][0]["remedy_apply"]).describe()
    assert line.startswith(f"the fix holds (one-sided p=0.016): with {described} 3/3 run(s)"), line
    verdict = json.load(open(tmp_path / "verify.json"))
    runs = verdict["runs"]
    assert [r["variant"] for r in runs] == ["unchanged", "fixed"] * 3
    assert all(r["outcome"] in ("hung", "crashed") and r["kind"] == kind for r in runs[::2]), runs
    assert all(r["outcome"] in ("passed", "ended") for r in runs[1::2]), runs
    assert verdict["change"] and os.path.dirname(verdict["folder"]) == os.path.dirname(folder)  # beside the report


@pytest.mark.timeout(900)
def test_verify_says_it_reruns_the_program_first_and_how_to_make_the_fix_permanent(tmp_path):
    folder = _report_of("thread_pool_before_fork", tmp_path, "--on-hang", "terminate")
    code, out, err = _verify(folder, timeout_s=800)
    assert code == 0, (out, err[-3000:])
    assert "starts your program again" in out.splitlines()[0]
    assert 'make it permanent: DataLoader(..., multiprocessing_context="forkserver") for the loader iterated at ' in out
    assert "thread_pool_before_fork.py:" in out


def test_a_kind_with_no_mechanical_fix_is_refused_with_the_reason(tmp_path):
    folder = _report_of("dataset_exception_len_lies", tmp_path)
    assert load_report(folder)["diagnoses"][0]["remedy_apply"] is None
    assert "prove:" not in open(os.path.join(folder, "report.txt")).read()
    code, out, err = _verify(folder, timeout_s=60)
    assert code == 2, (out, err)
    assert "dataset_error has no mechanical fix" in err and "--fix KEY=VALUE" in err
    assert not any(n.startswith("verify-") for n in os.listdir(os.path.dirname(folder)))  # nothing was run


def test_a_healthy_job_does_not_prove_a_fix(tmp_path):
    folder = _report_of("thread_pool_before_fork", tmp_path, "--on-hang", "terminate")
    code, out, err = _verify(folder, "--runs", "1", "--", PY, "-m", "probes.cases.healthy_slow_samples", timeout_s=400)
    assert code == 1, (out, err[-2000:])
    assert "not proven: the control did not hang as the report did (fork_inherited_lock) in 1 run(s)" in out, out


def test_dry_run_prints_each_runs_command_and_changes_and_starts_nothing(tmp_path):
    folder = _report_of("thread_pool_before_fork", tmp_path, "--on-hang", "terminate")
    code, out, err = _verify(folder, "--dry-run", "--runs", "2", "--fix", "env.OMP_NUM_THREADS=1", timeout_s=60)
    assert code == 0, err
    lines = [x for x in out.splitlines() if x.startswith(("unchanged", "fixed"))]
    assert [x.split(":")[0] for x in lines] == ["unchanged 1", "fixed 1", "unchanged 2", "fixed 2"]
    assert "DLWATCH_APPLY=" in lines[1] and "OMP_NUM_THREADS=1" in lines[1] and "DLWATCH_APPLY" not in lines[0]
    assert "probes.cases.thread_pool_before_fork" in lines[0]
    assert not any(n.startswith("verify-") for n in os.listdir(os.path.dirname(folder)))


def test_the_fix_changes_only_the_loader_at_the_reports_site(tmp_path):
    script = tmp_path / "two_loaders.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch.multiprocessing as mp
            from torch.utils.data import DataLoader

            def main():
                a = DataLoader(list(range(8)), batch_size=2, num_workers=1)
                b = DataLoader(list(range(8)), batch_size=2, num_workers=1, timeout=0)
                for _ in a:
                    pass
                for _ in b:
                    pass
                print(a.multiprocessing_context.get_start_method(), a.timeout, b.multiprocessing_context, b.timeout)
                print(mp.get_sharing_strategy())

            if __name__ == "__main__":
                main()
            """
        )
    )
    hook = inside.make_folder()
    try:
        env = inside.hook_env(os.environ, hook.path, None)
        env["DLWATCH_APPLY"] = json.dumps(
            {
                "loader": {"multiprocessing_context": "spawn", "timeout": 30},
                "sharing_strategy": "file_system",
                "sites": [f"{script}:7"],
            }
        )
        code, out, err = run_bounded([PY, str(script)], timeout_s=120, env=env, cwd=ROOT)
    finally:
        inside.remove_folder(hook)
    assert code == 0, err
    assert out.splitlines() == ["spawn 30 None 0", "file_system"]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_workers_thread_fix_runs_after_the_jobs_own_worker_init_fn(method, tmp_path):
    # The job raises each worker's intra-op threads to 4 in its worker_init_fn, which no
    # variable overrides; the fix sets 1 after it, at the report's loader only, and under
    # spawn too (the wrapper is pickled with the loader's settings).
    script = tmp_path / "threads.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import torch
            from torch.utils.data import DataLoader, Dataset

            class Threads(Dataset):
                def __len__(self):
                    return 4

                def __getitem__(self, i):
                    return torch.get_num_threads()

            def four(worker_id):
                torch.set_num_threads(4)

            def main():
                a = DataLoader(Threads(), 2, num_workers=1, worker_init_fn=four, multiprocessing_context="{method}")
                b = DataLoader(Threads(), 2, num_workers=1, worker_init_fn=four, multiprocessing_context="{method}")
                print([int(x) for y in a for x in y], [int(x) for y in b for x in y], a.worker_init_fn is four)

            if __name__ == "__main__":
                main()
            """
        )
    )
    hook = inside.make_folder()
    try:
        env = inside.hook_env(os.environ, hook.path, None)
        env["DLWATCH_APPLY"] = json.dumps({"worker_threads": 1, "sites": [f"{script}:15"]})
        code, out, err = run_bounded([PY, str(script)], timeout_s=120, env=env, cwd=ROOT)
        records = [json.load(open(os.path.join(hook.path, n))) for n in os.listdir(hook.path) if n.endswith(".json")]
    finally:
        inside.remove_folder(hook)
    assert code == 0, err
    assert out.splitlines() == ["[1, 1, 1, 1] [4, 4, 4, 4] False"], (out, err[-2000:])
    settings = [it["settings"] for r in records for it in r.get("iterators", [])]
    assert {s.get("worker_threads") for s in settings} == {1, None}, settings  # the recorder saw which got it
    assert {s["worker_init_fn"] for s in settings} == {"four"}, settings  # the job's own, named


def test_sigterm_to_verify_ends_the_run_in_progress_and_every_process_of_it(tmp_path):
    import signal
    import time

    import psutil

    from tests.real.helpers import start, wait_for

    folder = _report_of("thread_pool_before_fork", tmp_path, "--on-hang", "terminate")
    job = tmp_path / "slow_job_for_sigterm.py"
    job.write_text(
        "import time, torch\n"
        "from torch.utils.data import DataLoader\n"
        "if __name__ == '__main__':\n"
        "    for _ in DataLoader(list(range(10**6)), batch_size=1, num_workers=2):\n"
        "        time.sleep(0.2)\n"
    )

    def ours():
        return [p for p in psutil.process_iter(["cmdline"]) if str(job) in " ".join(p.info["cmdline"] or [])]

    proc = start(DLWATCH + ["verify", folder, "--seconds", "300", "--", PY, str(job)])
    try:
        wait_for(lambda: len(ours()) >= 3, 60, "the run's job and its workers")  # dlwatch run, main, workers
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, (out, err)
        assert "verify stopped by SIGTERM; the run in progress was ended" in out
        wait_for(lambda: not ours(), 30, "every process of the run to be gone")
    finally:
        kill_tree(proc)
        for p in ours():
            p.kill()


def test_a_run_that_fails_before_the_loader_is_said_and_leaves_nothing_in_the_temp_folder(tmp_path):
    """The job fails by itself before any loader (an input file the original had is gone): verify
    says so with the job's own error, and each run's private TMPDIR is removed after it."""
    job = tmp_path / "job"
    job.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    code_text = (
        "import os, sys, tempfile; open(os.path.join(tempfile.gettempdir(), 'pymp-left'), 'w').write('x'); "
        "sys.exit('FileNotFoundError: data/train.bin')"
    )
    reports_dir = tmp_path / "reports"
    folder = plant_report(
        reports_dir, [PY, "-I", "-c", code_text], job, "fd_exhausted", "crash", {"rlimit_nofile": 4096}
    )
    user_tmp = tmp_path / "usertmp"
    user_tmp.mkdir(mode=0o700)
    code, out, err = run_bounded(
        DLWATCH + ["verify", str(folder), "--runs", "1", "--seconds", "20"],
        timeout_s=240,
        env={**os.environ, "TMPDIR": str(user_tmp)},
    )
    assert code == 1, (code, out, err[-2000:])
    assert "failed by itself before its first batch" in out and "FileNotFoundError: data/train.bin" in out, out
    assert os.listdir(user_tmp) == []  # each run's private TMPDIR was made there, and removed


FLAKY = """\
import os, random, sys
import torch
from torch.utils.data import DataLoader, Dataset

here = os.path.dirname(os.path.abspath(__file__))
counter = os.path.join(here, "runs")
n = int(open(counter).read()) if os.path.exists(counter) else 0
open(counter, "w").write(str(n + 1))
fails = random.Random(n).random() < 0.5  # a seeded coin per run: the job fails about half the time


class Flaky(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        if fails and i == 5:
            raise ValueError(f"corrupt sample {i}")
        return torch.tensor([i])


if __name__ == "__main__":
    for _ in DataLoader(Flaky(), batch_size=4, num_workers=1):
        pass
"""


@pytest.mark.timeout(900)
def test_a_no_op_fix_of_a_job_that_fails_half_the_time_never_holds(tmp_path):
    """20 verifies of a fix that changes nothing (PYTHONHASHSEED) on a job that fails half the
    time, with the few runs that once made such a fix "proven": none may say it holds."""
    os.chmod(tmp_path, 0o755)
    job = tmp_path / "job"
    job.mkdir(mode=0o755)
    (job / "flaky.py").write_text(FLAKY)
    folder = plant_report(tmp_path / "reports", [PY, "flaky.py"], job, "dataset_error", "crash")
    verdicts = []
    for i in range(20):
        runs = str(1 + i % 2)
        code, out, err = _verify(
            str(folder), "--only", "--fix", "env.PYTHONHASHSEED=0", "--runs", runs, "--seconds", "60", timeout_s=300
        )
        assert code in (0, 1), (code, out, err[-2000:])
        verdicts.append(next(line for line in out.splitlines() if line.startswith(("the fix", "not proven"))))
    assert not [v for v in verdicts if v.startswith("the fix holds")], verdicts
    assert any("unchanged 1/1 crashed (dataset_error)" in v or "/2 crashed (dataset_error)" in v for v in verdicts)


def test_a_dry_run_of_an_attach_report_asks_no_consent_and_says_what_the_runs_would_need(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    fix = {"loader": {"multiprocessing_context": "forkserver"}}
    folder = plant_report(tmp_path / "reports", [PY, str(script)], tmp_path, "fork_inherited_lock", fix=fix)
    path = os.path.join(folder, "report.json")
    doc = json.load(open(path))
    doc["job"]["launch"]["watched_by"] = "attach"
    with open(path, "w") as f:
        json.dump(doc, f)
    code, out, err = _verify(folder, "--dry-run", "--all-loaders", timeout_s=60)
    assert code == 0, (out, err)  # before: exit 2, "add --yes", for a dry run that starts nothing
    assert "note: the runs themselves need --yes: " in out and "came from `dlwatch attach`" in out, out
    assert "fixed 1: " in out
    code, out, err = _verify(folder, "--all-loaders", timeout_s=60)
    assert code == 2 and "add --yes" in err, (code, out, err)  # the runs themselves still ask
