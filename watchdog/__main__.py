"""``python -m watchdog`` and the ``dlwatch`` console script run the command line
(:func:`watchdog.cli.main`). Ctrl-C at any point of dlwatch's own start-up (its imports take a
moment) ends it with one line and exit code 130, never a traceback."""

import signal
import sys


def run() -> None:
    """Import the command line and run it; exits with its code."""
    try:
        from .cli import main

        code = main()
    except KeyboardInterrupt:
        sys.stderr.write("dlwatch: interrupted\n")
        code = 128 + signal.SIGINT
    sys.exit(code)


if __name__ == "__main__":
    run()
