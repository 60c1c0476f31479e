"""The subcommands of ``dlwatch``, one module each (``run``, ``attach``, ``dump``, ``status``,
``reports``, ``show``, ``hook_env``, ``probe``, ``verify``, ``cluster``), the parser
(:mod:`.parser`) and what several share (:mod:`.common`). :func:`watchdog.cli.main` parses the
command line and imports the one command that runs. Importing this package imports nothing."""
