"""The job's own script, read (never run) for what a fix needs to know of it: whether a
DataLoader iterated at its top level sits under a main guard."""

from __future__ import annotations

import os
import stat


def _read_capped(path: str) -> bytes:
    """The bytes of ``path``: a regular file of at most ``MAX_SCRIPT_BYTES``, opened without
    following a link or blocking (open(2) ``O_NOFOLLOW|O_NONBLOCK``).

    Raises:
        OSError: it cannot be opened, is not a regular file, or is larger.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SCRIPT_BYTES:
            raise OSError(f"{path}: not a regular file of at most {MAX_SCRIPT_BYTES} bytes")
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read(MAX_SCRIPT_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)


# The most of a script verify reads to look for its main guard.
MAX_SCRIPT_BYTES = 4 * 2**20


def unguarded_site(site: str) -> bool:
    """Whether the DataLoader site ``file:line`` (iterated in the module's top level) lies
    outside every ``if __name__ == "__main__":`` block of its file. Under ``forkserver`` or
    ``spawn`` each worker imports the main script again as ``__mp_main__``
    (Lib/multiprocessing/spawn.py, ``_fixup_main_from_path``), so an unguarded loop runs
    again there and the workers fail (PyTorch's docs, "Platform-specific behaviors" of
    torch.utils.data). ``False`` when the file cannot be read or parsed (nothing is said then).
    The file is read, never run, without following a link, up to ``MAX_SCRIPT_BYTES``."""
    import ast

    path, _, line_text = site.rpartition(":")
    try:
        line = int(line_text)
        data = _read_capped(path)
        tree = ast.parse(data)
    except (ValueError, SyntaxError, OSError):
        return False

    def is_main_guard(node: ast.stmt) -> bool:
        test = node.test if isinstance(node, ast.If) else None
        return (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
        )

    for node in tree.body:
        if is_main_guard(node) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return False
    return True
