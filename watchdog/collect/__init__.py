"""Collectors: the only code that reads the watched processes (``/proc``, psutil, py-spy)."""
