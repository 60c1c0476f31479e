"""Which torch a job runs is read from ``torch/version.py`` beside the ``libtorch`` it maps
(discovery.torch_names_workers). The job chooses what it maps and where: any file mapped from a
folder ``…/torch/lib/libtorch…`` names a ``…/torch/version.py`` that a root dlwatch then opened
as root, following links, with a blocking open(2): a FIFO there froze the discovery of the
job's workers. It is read only as a regular file, opened without following its last link and
never for a FIFO or a device, as the job's user could. Every process here is bounded."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import pytest

from tests.real.conftest import SYSTEM_PY, as_user
from watchdog.collect import discovery

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)

JOB = """
import mmap, sys, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print("mapped", flush=True)
time.sleep(60)
"""


def test_a_fifo_named_as_torch_version_never_blocks_discovery(attacker, short_tmp_path):
    tmp_path = short_tmp_path
    os.chmod(tmp_path, 0o755)
    lib = tmp_path / "torch" / "lib"
    lib.mkdir(parents=True)
    so = lib / "libtorch_cpu.so"
    so.write_bytes(b"\0" * 4096)
    os.chmod(so, 0o644)
    os.mkfifo(tmp_path / "torch" / "version.py")
    os.chmod(tmp_path / "torch" / "version.py", 0o666)
    job = as_user(attacker, [SYSTEM_PY, "-c", JOB, str(so)], stdout=subprocess.PIPE, text=True)
    done = []
    reader = threading.Thread(target=lambda: done.append(discovery.torch_names_workers(job.pid)), daemon=True)
    try:
        assert job.stdout.readline().strip() == "mapped"
        reader.start()
        reader.join(20)
        blocked = reader.is_alive()
        if blocked:  # release the reader: a writer's open ends its blocking open
            os.close(os.open(tmp_path / "torch" / "version.py", os.O_WRONLY | os.O_NONBLOCK))
            reader.join(10)
    finally:
        job.kill()
        job.wait(30)
    assert not blocked, "discovery blocked in open(2) of a FIFO the job put at torch/version.py"
    assert done == [None]
