import os
import pathlib
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_collection_modifyitems(session, config, items):
    """The unit tier first, then the real tier: `pytest -q tests` then shows in its first
    seconds how the fast tier went, and its progress after that counts real jobs only."""
    items.sort(key=lambda item: 0 if "/tests/unit/" in str(item.fspath) else 1)


@pytest.fixture
def short_tmp_path():
    """A fresh folder with a short path (``/tmp/dlw-XXXXXXXX``), removed after the test: for
    messages that cut a long value, which a test process's own ``tmp_path`` (under pytest-xdist,
    ``…/popen-gwN/…``) can make."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="dlw-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
