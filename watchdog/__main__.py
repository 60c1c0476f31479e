"""``python -m watchdog`` runs the ``dlwatch`` command line."""

from .cli import entry

if __name__ == "__main__":
    entry()
