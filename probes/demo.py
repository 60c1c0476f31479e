"""The README's demo: watch the built-in training job deadlock, and read the diagnosis.

Run::

    python -m probes.demo [--report-dir DIR]

It runs ``dlwatch run --stall-timeout 5 --on-hang terminate -- python -m probes.train
--fault fork-lock --busy-thread``: the job's DataLoader workers deadlock on a lock inherited
through ``fork`` while a CPU-busy background thread keeps the main process's CPU up. The
watchdog notices that neither the iterating thread nor any worker moves, confirms it with
py-spy, writes a report, ends the job (exit code 124) and this script prints where the report
is and its first diagnosis. Exits 0 when the diagnosis is ``fork_inherited_lock``, else 1.
Takes about 20 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

from watchdog.exits import Exit

from . import module_name
from .cli import Parser
from .cli import folder as folder_type
from .env import child_env, python, work_dir


def main(argv=None) -> int:
    p = Parser(prog="python -m probes.demo", description=__doc__.split("\n")[0])
    p.add_argument(
        "--report-dir",
        type=folder_type,
        default="dlwatch-reports",
        help="where the report folder goes (default: %(default)s)",
    )
    args = p.parse_args(argv)
    report_dir = os.path.abspath(args.report_dir)
    cmd = python(
        "-m",
        "watchdog",
        "run",
        "--stall-timeout",
        "5",
        "--interval",
        "1",
        "--on-hang",
        "terminate",
        "--terminate-grace",
        "3",
        "--report-dir",
        report_dir,
        "--",
    ) + python("-m", module_name("train"), "--fault", "fork-lock", "--busy-thread", "--num-workers", "2")
    print("demo: running", shlex.join(cmd), flush=True)  # as it runs, interpreter and all
    print("demo: the job's DataLoader workers will deadlock; the watchdog should say why within ~10 s", flush=True)
    before = set(os.listdir(args.report_dir)) if os.path.isdir(args.report_dir) else set()
    started = time.monotonic()
    # probes.train found from any working directory; the children run -s -P in a private folder,
    # never importing from the caller's working directory, which another user may write.
    with work_dir() as cwd:
        code = subprocess.call(cmd, env=child_env(), cwd=cwd)
    new = sorted(set(os.listdir(args.report_dir)) - before) if os.path.isdir(args.report_dir) else []
    new = [n for n in new if not n.startswith(".")]
    print(
        f"\ndemo: dlwatch exited {code} after {time.monotonic() - started:.0f} s ({int(Exit.TERMINATED)} = it ended "
        "the hung job)"
    )
    if not new:
        print("demo: no report was written", file=sys.stderr)
        return Exit.FAILED
    folder = os.path.join(args.report_dir, new[-1])
    with open(os.path.join(folder, "report.json"), encoding="utf-8") as f:
        first = json.load(f)["diagnoses"][0]
    print(f"demo: report folder: {os.path.abspath(folder)}")
    print(f"demo: read it with:  less {os.path.join(folder, 'report.txt')}")
    print(f"demo: first diagnosis: {first['kind']} (confidence {first['confidence']}) at {first['location']}")
    print(f"demo: fix: {first['remedy']}")
    return Exit.OK if first["kind"] == "fork_inherited_lock" and code == Exit.TERMINATED else Exit.FAILED


if __name__ == "__main__":
    sys.exit(main())
