"""Fixtures of the real tier's hostile tests (``test_hostile*.py``): a second, unprivileged local
user made for the module and removed after it, and a ``/tmp``-like shared folder."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile

import pytest

SYSTEM_PY = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"


@pytest.fixture(scope="module")
def attacker():
    """An unprivileged local user, removed after the module."""
    name = f"dlw-attacker-{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, timeout=30
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], timeout=30)


@pytest.fixture
def shared_tmp():
    """A /tmp-like folder (sticky, world-writable) that both users use as TMPDIR."""
    path = tempfile.mkdtemp(prefix="dlwatch-hostile-", dir="/tmp")
    os.chmod(path, 0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def as_user(user, cmd, **kw) -> subprocess.Popen:
    return subprocess.Popen(cmd, user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/", **kw)
