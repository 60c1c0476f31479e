"""A root dlwatch beside a job and a local user it does not trust: each attack is played for real
by an unprivileged user made for the test (removed after), against dlwatch run as root, and the
test asserts what must not happen (a root folder deleted, a run frozen, a report written where
the attacker chose, a signal to a process that reused a group's number)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time

import pytest

from tests.real.conftest import SYSTEM_PY, as_user
from tests.real.helpers import DLWATCH, kill_tree, reports, run_bounded, start, wait_for
from watchdog.collect import procfs
from watchdog.types import ProcId
from watchdog.watch import act

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)


def test_attach_never_deletes_a_root_folder_the_job_names_as_its_hook_folder(attacker, tmp_path):
    victim = tmp_path / "victim"  # root's own 0700 folder, as /root/.ssh is
    victim.mkdir(mode=0o700)
    (victim / "authorized_keys").write_text("ssh-ed25519 AAAA root\n")
    env = {"PATH": "/usr/bin:/bin", "DLWATCH_HOOK_DIR": str(victim)}
    job = as_user(attacker, [SYSTEM_PY, "-c", "import time; time.sleep(4)"], env=env)
    try:
        code, _out, err = run_bounded(
            DLWATCH + ["attach", "--pid", str(job.pid), "--interval", "0.5", "--report-dir", str(tmp_path / "r")], 60
        )
    finally:
        job.kill()
        job.wait(10)
    assert code == 0, err
    assert victim.is_dir() and (victim / "authorized_keys").exists(), "root's folder was deleted"


def test_attach_never_takes_or_deletes_another_jobs_hook_folder_the_job_names(attacker, tmp_path):
    code, out, err = run_bounded(DLWATCH + ["hook-env"], 60)  # root's folder, made for another job
    assert code == 0, err
    other = next(item.split("=", 1)[1] for item in out.split() if item.startswith("DLWATCH_HOOK_DIR="))
    try:
        env = {"PATH": "/usr/bin:/bin", "DLWATCH_HOOK_DIR": other}  # its path is in /tmp for all to see
        job = as_user(attacker, [SYSTEM_PY, "-c", "import time; time.sleep(4)"], env=env)
        try:
            code, _out, err = run_bounded(
                DLWATCH + ["attach", "--pid", str(job.pid), "--interval", "0.5", "--report-dir", str(tmp_path / "r")],
                60,
            )
        finally:
            job.kill()
            job.wait(10)
        assert code == 0, err
        assert os.path.isdir(other), "another job's hook folder was deleted"
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_a_fifo_another_user_plants_where_dlwatch_sweeps_never_blocks_a_run(attacker, shared_tmp):
    planted = as_user(
        attacker,
        [
            SYSTEM_PY,
            "-c",
            "import os, sys; d = os.path.join(sys.argv[1], 'dlwatch-stderr-evil'); os.mkdir(d, 0o777); "
            "os.mkfifo(os.path.join(d, 'lock'), 0o666); "
            "os.symlink('/etc', os.path.join(sys.argv[1], 'dlwatch-stderr-link'))",
            shared_tmp,
        ],
    )
    assert planted.wait(30) == 0
    env = {**os.environ, "TMPDIR": shared_tmp}
    t0 = time.monotonic()
    code, _out, err = run_bounded(DLWATCH + ["run", "--", SYSTEM_PY, "-c", "print('ok')"], 60, env=env)
    assert code == 0, err
    assert time.monotonic() - t0 < 40
    assert stat.S_ISFIFO(os.lstat(os.path.join(shared_tmp, "dlwatch-stderr-evil", "lock")).st_mode)  # left alone
    assert os.path.isdir("/etc") and os.path.islink(os.path.join(shared_tmp, "dlwatch-stderr-link"))


@pytest.mark.parametrize("squat", ["folder", "link"])
def test_a_fallback_report_folder_another_user_made_first_is_never_written_to(attacker, shared_tmp, squat):
    theirs = os.path.join(shared_tmp, "attacker-own")
    code = as_user(
        attacker,
        [
            SYSTEM_PY,
            "-c",
            "import os, sys; own, squat, kind = sys.argv[1:]; os.mkdir(own, 0o777); os.chmod(own, 0o777); "
            "(os.mkdir(squat, 0o777), os.chmod(squat, 0o777)) if kind == 'folder' else os.symlink(own, squat)",
            theirs,
            os.path.join(shared_tmp, "dlwatch-reports"),
            squat,
        ],
    ).wait(30)
    assert code == 0
    env = {**os.environ, "TMPDIR": shared_tmp}
    job = [SYSTEM_PY, "-c", "import os, time; time.sleep(1.5); os.kill(os.getpid(), 9)"]  # a crash report
    code, _out, err = run_bounded(DLWATCH + ["run", "--report-dir", "/proc/no-such-folder", "--"] + job, 60, env=env)
    assert code == 137, err
    written = [line.split("full report: ")[1].strip() for line in err.splitlines() if "full report: " in line]
    assert written, err
    folder = os.path.dirname(written[0])
    assert os.path.realpath(folder).startswith(shared_tmp + "/") and not os.path.realpath(folder).startswith(theirs)
    assert not os.listdir(theirs) and not os.listdir(os.path.realpath(os.path.join(shared_tmp, "dlwatch-reports")))
    st = os.lstat(os.path.dirname(folder))
    assert st.st_uid == 0 and not st.st_mode & 0o077
    assert reports(os.path.dirname(folder)), err


def test_a_rank_variable_the_job_sets_never_reaches_a_path(tmp_path):
    env = {**os.environ, "RANK": "0/../../x", "WORLD_SIZE": "2"}
    proc = start([SYSTEM_PY, "-c", "import time; time.sleep(30)"], env=env)
    try:
        from watchdog.collect import discovery

        wait_for(lambda: procfs.proc_stat(proc.pid), 10, "the process")
        assert discovery.rank_env(proc.pid) is None  # not an integer: not a rank
    finally:
        kill_tree(proc)
    good = start([SYSTEM_PY, "-c", "import time; time.sleep(30)"], env={**os.environ, "RANK": "3", "WORLD_SIZE": "x/y"})
    try:
        from watchdog.collect import discovery

        wait_for(lambda: procfs.proc_stat(good.pid), 10, "the process")
        assert discovery.rank_env(good.pid) == {"RANK": "3"}
    finally:
        kill_tree(good)


def test_the_final_sigkill_never_reaches_a_process_that_reused_the_job_groups_number():
    """The job (its own group G) ends on SIGTERM; during the grace period another program
    gets pid G and a group G of its own (forced with ns_last_pid, as an attacker could wait for
    it): it must survive the SIGKILL that ends the grace period."""
    job = subprocess.Popen(
        [SYSTEM_PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, lambda *a: exit(0)); time.sleep(60)"],
        process_group=0,
    )
    other = None
    try:
        wait_for(lambda: procfs.proc_stat(job.pid), 10, "the job")
        member = ProcId(job.pid, procfs.start_ticks(job.pid))
        group = job.pid

        def sleep(s: float) -> None:
            nonlocal other
            if other is None and job.poll() is not None:  # the group is empty now: take its number
                with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                    f.write(str(group - 1))
                other = subprocess.Popen(["sleep", "30"], start_new_session=True)
            time.sleep(s)

        said = act.terminate_tree([member], 1.0, own_group=group, ended=lambda: False, sleep=sleep)
        assert other is not None, said
        if other.pid != group:
            pytest.skip(f"the kernel gave pid {other.pid}, not {group} (another process took it first)")
        with pytest.raises(subprocess.TimeoutExpired):  # a SIGKILL would have ended it by then
            other.wait(2.0)
    finally:
        for p in (job, other):
            if p is not None:
                p.kill()
                p.wait(10)


def test_a_member_whose_pid_was_reused_is_never_signalled():
    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        wait_for(lambda: procfs.proc_stat(bystander.pid), 10, "the bystander")
        stale = ProcId(bystander.pid, procfs.start_ticks(bystander.pid) - 1)  # same pid, another process
        said = act.terminate_tree([stale], 0.5)
        assert "nothing signalled" in said
        with pytest.raises(subprocess.TimeoutExpired):
            bystander.wait(1.0)
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait(10)
