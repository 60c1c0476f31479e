"""No secret leaves in any byte dlwatch writes. A real job whose DataLoader worker hangs carries
one secret of each kind where jobs carry them (its environment, its command line, the locals of
the hung frame with ``py_spy.locals: true``, an exception message and its stderr); dlwatch
reports the hang, runs an alert hook that saves its whole environment, and the report is also
rendered as HTML. Every file written, the hook's environment and dlwatch's own stderr are then
searched for each secret."""

from __future__ import annotations

import os
import textwrap

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
    config.write_text(f"py_spy:\n  locals: true\non_hang_exec: 'env | grep ^DLWATCH_ > {hook_out}'\n")
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
