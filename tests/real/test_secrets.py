"""No secret leaves in any byte dlwatch writes. A real job whose DataLoader worker hangs carries
one secret of each kind where jobs carry them (its environment, its command line, the locals of
the hung frame with ``py_spy.locals: true``, an exception message and its stderr); dlwatch
reports the hang, runs an alert hook that saves its whole environment, and the report is also
rendered as HTML. Every file written, the hook's environment and dlwatch's own stderr are then
searched for each secret."""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from tests.real.helpers import DLWATCH, PY, reports, run_bounded

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0cmFpbmVyIn0.c2VjcmV0LXNpZ25hdHVyZS1mb3ItdGVzdHM"
SECRETS = {
    "env by name": "hf_EnvSecretByName0123456789ab",
    "env by shape": "UrlPassw0rdInEnv",
    "argv flag": "ArgvApiKeyValue42",
    "argv -p": "DashPSecret77",
    "local by name": "LocalPasswordValue9",
    "local by shape": "9f2c8a1b7e3d4c5f60718293a4b5c6d7e8f90a1b",
    "exception": JWT,
    "stderr": "StderrTokenValue0123456789abcd",
}

JOB = textwrap.dedent(
    f"""
    import sys, threading, torch
    from torch.utils.data import DataLoader, Dataset

    class Shards(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            password = "{SECRETS["local by name"]}"
            url = "https://bucket.s3.amazonaws.com/x.tar?X-Amz-Signature={SECRETS["local by shape"]}"
            if i >= 8:
                try:
                    raise PermissionError("401 for token {JWT}")
                except PermissionError as e:
                    print(f"retrying after: {{e}}; bearer {SECRETS["stderr"]}", file=sys.stderr, flush=True)
                threading.Event().wait()  # the worker hangs holding its secrets
            return torch.ones(2)

    if __name__ == "__main__":
        for _ in DataLoader(Shards(), batch_size=4, num_workers=1):
            pass
    """
)


def test_no_secret_of_the_job_reaches_any_file_hook_or_stream_dlwatch_writes(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(JOB)
    hook_out = tmp_path / "hook.env"
    config = tmp_path / "dlwatch.yaml"
    config.write_text(f"py_spy:\n  locals: true\nalerts:\n  on_hang_exec: 'env | grep ^DLWATCH_ > {hook_out}'\n")
    env = {
        **os.environ,
        "HF_TOKEN": SECRETS["env by name"],
        "DATABASE_URL": f"postgres://trainer:{SECRETS['env by shape']}@db:5432/runs",
    }
    report_dir = tmp_path / "reports"
    cmd = DLWATCH + ["run", "--config", str(config), "--report-dir", str(report_dir), "--stall-timeout", "4"]
    cmd += ["--on-hang", "terminate", "--terminate-grace", "2", "--", PY, str(script)]
    cmd += [f"--api-key={SECRETS['argv flag']}", "-p", SECRETS["argv -p"]]
    code, out, err = run_bounded(cmd, 150, env=env)
    assert code == 124, err[-3000:]
    (folder,) = reports(str(report_dir))
    html_code, html_out, html_err = run_bounded(DLWATCH + ["show", folder, "--html"], 60)
    assert html_code == 0, html_err
    written = {}
    for base, _dirs, files in os.walk(report_dir):
        for name in files:
            path = os.path.join(base, name)
            with open(path, "rb") as f:
                written[path] = f.read().decode("utf-8", "replace")
    assert any(p.endswith("report.html") for p in written) and any("py-spy-" in p for p in written)
    for _ in range(50):
        if hook_out.exists() and hook_out.stat().st_size:
            break
        import time

        time.sleep(0.1)
    written["the alert hook's environment"] = hook_out.read_text()
    assert "DLWATCH_SUMMARY=" in written["the alert hook's environment"]
    written["dlwatch's stderr"] = err
    written["dlwatch's stdout"] = out + html_out
    # The job's own stderr passes through dlwatch's: only dlwatch's own lines are its writing.
    written["dlwatch's stderr"] = "\n".join(line for line in err.splitlines() if line.startswith(("dlwatch", "  ")))
    leaks = [
        f"{kind} in {where}" for kind, secret in SECRETS.items() for where, text in written.items() if secret in text
    ]
    assert not leaks, leaks
    report_txt = next(text for path, text in written.items() if path.endswith("report.txt"))
    assert "<redacted>" in report_txt and "train.py" in report_txt  # redacted, and still says where


# A bare AWS secret access key: 40 characters with no shape of their own, known as a secret only
# because the job's environment names it (AWS_SECRET_ACCESS_KEY).
AWS_SECRET = "q9XbT2/kLm7Rv4Ns8Pw1Zc6Yd3Hf5Jg0Ka+EuWx2B"

HANGS = textwrap.dedent(
    """
    import os, sys, threading, torch
    from torch.utils.data import DataLoader, Dataset

    class Shards(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            pair = (os.environ["AWS_SECRET_ACCESS_KEY"], "eu-west-1")
            if i >= 8:
                print(f"botocore: signing with {pair[0]} failed", file=sys.stderr, flush=True)
                threading.Event().wait()  # the worker hangs holding it
            return torch.ones(2)

    if __name__ == "__main__":
        for _ in DataLoader(Shards(), batch_size=4, num_workers=1):
            pass
    """
)
# A deterministic crash report (the stderr line of a killed worker), the key in the stderr tail.
CRASHES = (
    "import os, sys; key = os.environ['AWS_SECRET_ACCESS_KEY']; "
    "sys.stderr.write(f'botocore: signing with {key} failed\\n'); "
    "sys.stderr.write(f'RuntimeError: DataLoader worker (pid 12345) is killed by signal: Killed. ({key})\\n'); "
    "sys.exit(1)"
)


@pytest.mark.parametrize("mode", ["hang", "crash"])
def test_a_bare_aws_secret_key_of_the_jobs_environment_reaches_nothing_dlwatch_writes(tmp_path, mode):
    hook_out = tmp_path / "hook.env"
    config = tmp_path / "dlwatch.yaml"
    config.write_text(f"py_spy:\n  locals: true\non_{mode}_exec: 'env | grep ^DLWATCH_ > {hook_out}'\n")
    report_dir = tmp_path / "reports"
    cmd = DLWATCH + ["run", "--config", str(config), "--report-dir", str(report_dir), "--stall-timeout", "4"]
    if mode == "hang":
        script = tmp_path / "train.py"
        script.write_text(HANGS)
        cmd += ["--on-hang", "terminate", "--terminate-grace", "2", "--", PY, str(script)]
    else:
        cmd += ["--", PY, "-c", CRASHES]
    code, out, err = run_bounded(cmd, 150, env={**os.environ, "AWS_SECRET_ACCESS_KEY": AWS_SECRET})
    assert code == (124 if mode == "hang" else 1), err[-3000:]
    assert AWS_SECRET in err  # the job's own stderr passed through: it did print it
    (folder,) = reports(str(report_dir))
    show_code, show_out, show_err = run_bounded(DLWATCH + ["show", folder], 60)
    html_code, html_out, html_err = run_bounded(DLWATCH + ["show", folder, "--html"], 60)
    assert show_code == 0 and html_code == 0, show_err + html_err
    written = {"dlwatch show": show_out + show_err + html_out + html_err}
    for base, _dirs, files in os.walk(report_dir):
        for name in files:
            with open(os.path.join(base, name), "rb") as f:
                written[name] = f.read().decode("utf-8", "replace")
    assert {"report.txt", "report.json", "report.html"} <= set(written), sorted(written)
    for _ in range(100):
        if hook_out.exists() and hook_out.stat().st_size:
            break
        time.sleep(0.1)
    written["the alert hook's environment"] = hook_out.read_text()
    assert "DLWATCH_SUMMARY=" in written["the alert hook's environment"]
    # dlwatch's own lines (the job's stderr passes through it as it is)
    written["dlwatch's stderr"] = "\n".join(line for line in err.splitlines() if line.startswith(("dlwatch", "  ")))
    assert "botocore: signing with <redacted>" in written["report.json"]  # the line is there, its key is not
    leaks = [where for where, text in written.items() if AWS_SECRET in text or AWS_SECRET[:20] in text]
    assert not leaks, leaks
