import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_collection_modifyitems(session, config, items):
    """The unit tier first, then the real tier: `pytest -q tests` then shows in its first
    seconds how the fast tier went, and its progress after that counts real jobs only."""
    items.sort(key=lambda item: 0 if "/tests/unit/" in str(item.fspath) else 1)
