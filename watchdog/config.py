"""Settings: built-in defaults, a YAML file, then command-line overrides, validated once.

The field definitions below are the one description of every setting: each field's type,
range, default and a one-line ``description`` (what it does, in which unit). ``config.yaml``
(every key, its default, its description as the comment), the settings table of
``docs/configuration.md`` (which also says why) and the ``--help`` of the flags follow them; a
test (``tests/unit/test_config.py``) checks all three. Settings that belong together are
grouped (``py_spy``, ``alerts``, ``metrics``); the old flat names of the moved or renamed ones
(:data:`DEPRECATED`) are still read, with one line on stderr.

Validation is msgspec's (https://jcristharif.com/msgspec/constraints.html, ``convert`` with
``strict=True``: no ``"1"`` for a number, no ``1`` for a boolean; ``forbid_unknown_fields``);
this module adds what msgspec does not do: unknown keys named with their full dotted path,
non-finite numbers refused, errors that name the file, the line and the key, with a short
excerpt of the value. msgspec replaced pydantic, whose import alone took ~90 ms of the
~0.24 s CPU a ``dlwatch run`` spent starting (msgspec: ~15 ms; issue #10).

The YAML file is read defensively (issue #10): only a regular file of at most
:data:`MAX_FILE_BYTES`, never opened in a blocking way; no anchors or aliases (an alias bomb
of a few hundred bytes expands to gigabytes); at most :data:`MAX_DEPTH` levels of nesting.
Every problem is a :class:`~watchdog.errors.ConfigError`, one line.
"""

# No ``from __future__ import annotations``: the field annotations are evaluated here, so
# ``describe`` reads each field's ``Meta`` without ``typing.get_type_hints``.

import argparse
import math
import os
import re
import reprlib
import stat
import sys
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal, Optional

import msgspec
from msgspec import Meta

from . import argtypes
from .errors import ConfigError

MAX_FILE_BYTES = 1 << 20
"""Largest settings file read, in bytes (``config.yaml`` is about 4 KiB)."""
MAX_DEPTH = 16
"""Deepest nesting of YAML collections accepted (settings nest 2 deep)."""
EXCERPT_CHARS = 80
"""At most this many characters of a value (or key) are echoed in an error."""

_NO_NUL = r"^[^\x00]*$"
_Text = Annotated[str, Meta(min_length=1, pattern=_NO_NUL)]


class _Settings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    def as_dict(self) -> dict[str, Any]:
        """Every setting as a plain nested dict (for reports and ``config.yaml``'s test)."""
        return msgspec.to_builtins(self)


class PySpyConfig(_Settings, frozen=True):
    """How stacks are taken (``py-spy dump``). Frozen; see :class:`Config`."""

    path: Annotated[
        Optional[_Text],
        Meta(description="py-spy binary; null: the one beside dlwatch's Python, else $PATH's"),
    ] = None
    native: Annotated[
        bool,
        Meta(description="include native (C/C++) frames; Python-only frames if native unwinding fails"),
    ] = True
    locals: Annotated[bool, Meta(description="include local variables (may hold secrets: off by default)")] = False
    timeout_s: Annotated[
        float,
        Meta(gt=0, le=120, description="seconds from a stall's detection by which all its py-spy dumps are over"),
    ] = 5.0
    at_warning: Annotated[
        bool,
        Meta(description="take a --nonblocking dump (no pause) of the processes a warning names"),
    ] = True


class AlertsConfig(_Settings, frozen=True):
    """The user's commands run after a report is written (``watchdog.watch.alert``). Frozen."""

    on_hang_exec: Annotated[
        Optional[_Text],
        Meta(description="shell command run after a hang report (/bin/sh -c, DLWATCH_* set); null: none"),
    ] = None
    on_crash_exec: Annotated[Optional[_Text], Meta(description="the same as on_hang_exec, after a crash report")] = None
    on_warning_exec: Annotated[
        Optional[_Text],
        Meta(description="the same as on_hang_exec, after a warning (or an ended job's) report"),
    ] = None
    exec_timeout_s: Annotated[
        float,
        Meta(gt=0, le=3600, description="seconds an alert command may run before it is killed with its children"),
    ] = 30.0


class MetricsConfig(_Settings, frozen=True):
    """The Prometheus endpoint (``watchdog.watch.metrics``). Frozen."""

    port: Annotated[
        Optional[Annotated[int, Meta(ge=1, le=65535)]],
        Meta(description="TCP port of http://ADDR:PORT/metrics (Prometheus); null: no endpoint"),
    ] = None
    addr: Annotated[
        _Text,
        Meta(description="address the metrics endpoint listens on; 127.0.0.1: this host only"),
    ] = "127.0.0.1"


class Config(_Settings, frozen=True):
    """Every setting of the watchdog: a frozen object, ``cfg.py_spy.timeout_s``.

    Durations are in seconds (the ``_s`` suffix), sizes in bytes. Each field's ``description``
    (:func:`describe`) says in one line what it does and in which unit; why, and how it was
    measured, is in ``docs/configuration.md``. Build one with :func:`load` or :func:`validate`.
    """

    interval_s: Annotated[
        float,
        Meta(ge=0.1, le=60, description="seconds between samples of the job's processes (psutil and /proc, no ptrace)"),
    ] = 1.0
    stall_timeout_s: Annotated[
        float,
        Meta(gt=0, description="seconds with no progress (iterating thread, every worker) before a stall is examined"),
    ] = 60.0
    busy_stall_timeout_s: Annotated[
        float,
        Meta(gt=0, description="seconds of waiting on busy workers that send nothing before it is a suspected hang"),
    ] = 300.0
    stall_min_s: Annotated[
        float,
        Meta(gt=0, description="with the inside view: the shortest stall, in seconds, the rhythm rule examines"),
    ] = 10.0
    stall_p99_factor: Annotated[
        float,
        Meta(ge=1, description="rhythm rule: a stall is examined after this many p99 batch intervals (a factor)"),
    ] = 30.0
    on_hang: Annotated[
        Literal["report", "terminate"],
        Meta(description="report | terminate: after a hang report, leave the job, or end it if the hang is proven"),
    ] = "report"
    terminate_unproven_after_s: Annotated[
        Optional[Annotated[float, Meta(gt=0)]],
        Meta(description="terminate: seconds with no batch before an unproven hang also ends the job; null: off"),
    ] = None
    terminate_outside_loader: Annotated[
        bool,
        Meta(description="on_hang=terminate: also end a job stalled outside its DataLoader"),
    ] = False
    terminate_grace_s: Annotated[
        float,
        Meta(ge=0, le=600, description="seconds between SIGTERM and SIGKILL when dlwatch ends the job's processes"),
    ] = 10.0
    report_dir: Annotated[
        _Text,
        Meta(description="folder the report folders are written in (made 0700; relative to the working directory)"),
    ] = "dlwatch-reports"
    memory_read_base_interval_s: Annotated[
        float,
        Meta(gt=0, description="seconds between USS/PSS reads of a process whose memory moves (the back-off's base)"),
    ] = 10.0
    timeline_samples: Annotated[
        int,
        Meta(
            ge=10,
            le=100_000,
            description="samples kept in the timeline (600 x interval_s: 10 minutes or more by default)",
        ),
    ] = 600
    cpu_progress_s: Annotated[
        float,
        Meta(gt=0, description="CPU seconds a watched thread must use since its last mark to count as progress"),
    ] = 0.05
    warning_interval_s: Annotated[
        float,
        Meta(gt=0, description="seconds between looks for warnings (memory growth, fd/shm pressure, CPU)"),
    ] = 15.0
    stderr_tail_bytes: Annotated[
        int,
        Meta(
            ge=0,
            le=16 * 2**20,
            description="bytes of the job's stderr kept for crash diagnosis (dlwatch run); 0: stderr left alone",
        ),
    ] = 65536
    hook: Annotated[
        bool,
        Meta(description="dlwatch run: record the DataLoader's own view inside the job; false: outside only"),
    ] = True
    data_checks: Annotated[
        bool,
        Meta(description="with the hook: warn when workers replay one stream or draw the same random numbers"),
    ] = True
    node: Annotated[
        Optional[_Text],
        Meta(description="this node's name in report folders, reports and metrics; null: this host's name"),
    ] = None
    py_spy: Annotated[PySpyConfig, Meta(description="how stacks are taken (py-spy dump)")] = PySpyConfig()
    alerts: Annotated[AlertsConfig, Meta(description="commands run after a report is written")] = AlertsConfig()
    metrics: Annotated[MetricsConfig, Meta(description="the Prometheus endpoint (off by default)")] = MetricsConfig()


DEPRECATED = {
    "full_info_interval_s": "memory_read_base_interval_s",
    "on_hang_exec": "alerts.on_hang_exec",
    "on_crash_exec": "alerts.on_crash_exec",
    "on_warning_exec": "alerts.on_warning_exec",
    "exec_timeout_s": "alerts.exec_timeout_s",
    "metrics_port": "metrics.port",
    "metrics_addr": "metrics.addr",
}
"""Old top-level keys still read, each under its new dotted key (issue #36): a file that uses
one gets one line on stderr naming the new keys (:func:`load`)."""


# --- field descriptions --------------------------------------------------------------------


def _is_group(annotation: Any) -> bool:
    """Whether a field's annotation is a nested group of settings (``py_spy``), not a setting."""
    inner = annotation.__origin__
    return isinstance(inner, type) and issubclass(inner, _Settings)


def _walk(cls: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, annotation)`` of every field of ``cls``, in definition order: a nested
    group (``py_spy``) first, then its fields (``py_spy.path`` …)."""
    for name in cls.__struct_fields__:
        annotation = cls.__annotations__[name]
        yield prefix + name, annotation
        if _is_group(annotation):
            yield from _walk(annotation.__origin__, f"{prefix}{name}.")


_FIELDS: dict[str, Any] = dict(_walk(Config))
"""Every field's annotation by its dotted key: the one walk of the definitions, which
:func:`describe`, :func:`all_keys` and the checks of :func:`validate` all read."""


def _field_type(dotted: str) -> Any:
    """The annotation of the setting ``dotted`` (``"py_spy.timeout_s"``). Raises KeyError."""
    return _FIELDS[dotted]


def describe(dotted: str) -> str:
    """The description of the setting ``dotted`` (``"interval_s"``, ``"py_spy.timeout_s"``).

    Raises:
        KeyError: no such setting.
    """
    # Annotated[Annotated[str, Meta(min_length=1)], Meta(description=…)] is flattened: the
    # constraints' Meta comes first, so look for the one that has a description.
    return next(m.description for m in _field_type(dotted).__metadata__ if isinstance(m, Meta) and m.description)


def all_keys() -> list[str]:
    """Every setting's dotted key, in definition order; nested groups (``py_spy``) are not listed,
    their fields are (``py_spy.path`` …)."""
    return [dotted for dotted, annotation in _FIELDS.items() if not _is_group(annotation)]


def bounds(dotted: str) -> str:
    """The range the setting ``dotted`` accepts, from its ``Meta`` constraints, as text
    (``">= 0.1, <= 60"``); empty when it has none.

    Raises:
        KeyError: no such setting.
    """
    words = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    parts = [
        f"{sign} {getattr(m, key):g}"
        for m in getattr(_field_type(dotted), "__metadata__", ())
        if isinstance(m, Meta)
        for key, sign in words.items()
        if getattr(m, key, None) is not None
    ]
    return ", ".join(parts)


def flag_help(dotted: str, negated: bool = False) -> str:
    """The ``--help`` text of the flag that sets ``dotted``: its description, the key and the
    range it accepts (:func:`bounds`) (``negated``: a ``--no-…`` flag that sets it to false).
    ``%`` is doubled for argparse.

    Raises:
        KeyError: no such setting.
    """
    if negated:
        text = f"sets {dotted} to false; {dotted}: {describe(dotted)}"
    else:
        span = bounds(dotted)
        text = f"{describe(dotted)} ({dotted}{'; ' + span if span else ''})"
    return text.replace("%", "%%")


# --- errors --------------------------------------------------------------------------------

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = EXCERPT_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxlevel = 2


def excerpt(value: Any) -> str:
    """``repr(value)`` cut to about :data:`EXCERPT_CHARS` characters, never more than one line
    (:mod:`reprlib`; an integer too long for ``repr`` is described by its size)."""
    try:
        text = _REPR.repr(value)
    except ValueError:  # int beyond sys.get_int_max_str_digits()
        return f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else f"<a {type(value).__name__}>"
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."


def _printable(text: object, limit: int = 4 * EXCERPT_CHARS) -> str:
    """``str(text)`` with control characters escaped, cut to ``limit`` characters: safe in one line."""
    text = re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shown(path: str) -> str:
    """``path`` as an error names it: printable, and ``''`` when empty."""
    return _printable(path) or "''"


def _key_name(key: Any) -> str:
    return _printable(key, EXCERPT_CHARS) if isinstance(key, str) else excerpt(key)


def _at(path: str, lines: Mapping[str, int], dotted: str) -> str:
    """``path:LINE`` when the key's line in the file is known, else ``path``."""
    line = lines.get(dotted)
    return f"{path}:{line}" if line else path


# --- validation ----------------------------------------------------------------------------


def _precheck(data: Any, prefix: str, source: str, lines: Mapping[str, int]) -> None:
    """What msgspec does not say well: unknown or non-text keys (named by their dotted path) and
    non-finite or absurdly large numbers, found before :func:`msgspec.convert` sees them."""
    if not isinstance(data, dict):
        return  # msgspec says "expected object"
    for key, value in data.items():
        name = prefix + _key_name(key)
        # A key holding a dot ("py_spy.native" at the top level) names no field, whatever it spells.
        annotation = _FIELDS.get(prefix + key) if isinstance(key, str) and "." not in key else None
        if annotation is None:
            raise ConfigError(name, "unknown setting", _at(source, lines, name))
        if _is_group(annotation):
            _precheck(value, name + ".", source, lines)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(name, f"expected a finite number (got {excerpt(value)})", _at(source, lines, name))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
            raise ConfigError(name, f"number out of range (got {excerpt(value)})", _at(source, lines, name))


_MSGSPEC_AT = re.compile(r" - at `\$((?:\.[A-Za-z_][A-Za-z0-9_]*)*)`$")


def _value_at(data: Any, dotted: str) -> Any:
    for part in dotted.split(".") if dotted else []:
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _explain(message: str, dotted: str) -> str:
    """msgspec's ``Expected `float` >= 0.1`` as ``expected float >= 0.1``; the value itself is
    left out (msgspec echoes an enum value in full) and added, truncated, by the caller."""
    message = message.split(", got ", 1)[0].replace("`", "").replace(" | null", " or null")
    if message.startswith("Invalid enum value"):
        choices = getattr(_field_type(dotted).__origin__, "__args__", ())
        return "expected one of " + ", ".join(choices)
    if _NO_NUL in message.replace("\\\\", "\\"):
        return "expected text without NUL bytes"
    message = (message[:1].lower() + message[1:]).replace("expected object", "expected a mapping")
    return message if len(message) <= 2 * EXCERPT_CHARS else message[: 2 * EXCERPT_CHARS - 3] + "..."


def upgrade(
    data: Mapping[str, Any], source: str, lines: Mapping[str, int] | None = None
) -> tuple[dict[str, Any], dict[str, int], dict[str, str]]:
    """``(data, lines, renamed)``: ``data`` with every :data:`DEPRECATED` top-level key moved to
    its new dotted key (``metrics_port: 9400`` becomes ``metrics: {port: 9400}``), ``lines``
    with the new keys at the old keys' lines, and ``renamed`` mapping each new key given under
    its old name to that old name. A mapping with no old key comes back as it was (copied).

    Raises:
        ConfigError: an old key and its new key are both given, or the new key's group
            (``alerts``, ``metrics``) is given as something other than a mapping; naming the
            old key, ``source`` and its line.
    """
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    where = dict(lines or {})
    renamed: dict[str, str] = {}
    for old, new in DEPRECATED.items():
        if old not in out:
            continue
        *parents, leaf = new.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(
                    old, f"moved to {new}, but {part} is not a mapping (got {excerpt(node)})", _at(source, where, old)
                )
        if leaf in node:
            raise ConfigError(old, f"the old name of {new}, which is set too: keep only {new}", _at(source, where, old))
        node[leaf] = out.pop(old)
        renamed[new] = old
        if old in where:
            where[new] = where[old]
    return out, where, renamed


def deprecation_line(source: str, renamed: Mapping[str, str], lines: Mapping[str, int] | None = None) -> str:
    """The one line that says which old keys ``source`` used and their new names
    (``renamed``: new dotted key -> old key, from :func:`upgrade`), without a newline."""
    moves = ", ".join(
        f"{old} -> {new}" + (f" (line {lines[old]})" if lines and old in lines else "")
        for new, old in sorted(renamed.items(), key=lambda item: (lines or {}).get(item[1], 0))
    )
    return f"dlwatch: {source}: deprecated settings, read under their new names: {moves}"


def _say(line: str) -> None:
    """``line`` and a newline on stderr; a stderr that cannot be written is ignored."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def validate(data: Mapping[str, Any], source: str, lines: Mapping[str, int] | None = None) -> Config:
    """Build a :class:`Config` from a mapping of settings (nested: ``{"py_spy": {...}}``).

    ``source`` names where ``data`` came from (a file path, ``command line``); ``lines`` maps
    dotted keys to their line in that file, when known. An old key (:data:`DEPRECATED`) is read
    under its new name (:func:`upgrade`), silently here (:func:`load` says so), and an error
    about its value names it as it was written.

    Raises:
        ConfigError: for an unknown key, a wrong type (strict: ``"1"`` is not a number, ``1``
            not a boolean), an out-of-range or non-finite value, an old key given with its new
            one: naming the first offending key, ``source`` (``path:LINE`` when the line is
            known) and an excerpt of the value.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(
            "(top level)", f"expected a mapping of settings (got {excerpt(data)})", _at(source, lines or {}, "")
        )
    data, lines, renamed = upgrade(data, source, lines)
    try:
        return _validate(data, source, lines)
    except ConfigError as e:
        if e.key not in renamed:
            raise
        raise ConfigError(renamed[e.key], str(e).split(f"{e.key}: ", 1)[-1], e.source) from None


def _validate(data: dict[str, Any], source: str, lines: Mapping[str, int]) -> Config:
    _precheck(data, "", source, lines)
    try:
        return msgspec.convert(data, Config, strict=True)
    except msgspec.ValidationError as e:
        message = str(e)
        found = _MSGSPEC_AT.search(message)
        dotted = found.group(1)[1:] if found else "(top level)"
        value = _value_at(data, dotted) if found else data
        raise ConfigError(
            dotted,
            f"{_explain(message[: found.start()] if found else message, dotted)} (got {excerpt(value)})",
            _at(source, lines, dotted),
        ) from None


# --- reading the file ----------------------------------------------------------------------


class _Refused(Exception):
    """A YAML construct a settings file may not hold, at 1-based ``line``."""

    def __init__(self, line: int, what: str, message: str) -> None:
        super().__init__(message)
        self.line, self.what, self.message = line, what, message


_LOADER: type | None = None


def _loader_class() -> type:
    """The YAML loader, built on first use (``import yaml`` costs ~10 ms a run without ``--config``
    does not need): PyYAML's safe loader (YAML 1.1, https://pyyaml.org/wiki/PyYAMLDocumentation)
    plus: ``1e3`` is a float (YAML 1.2 reads it so; PyYAML's 1.1 resolver wants a dot), a
    duplicate key is an error, not a silent override, and no anchors, aliases or deep nesting."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            event = self.peek_event()
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent):
                raise _Refused(
                    line,
                    f"alias *{_printable(event.anchor, EXCERPT_CHARS)}",
                    "YAML anchors and aliases are not allowed in a settings file",
                )
            if getattr(event, "anchor", None) is not None:
                raise _Refused(
                    line,
                    f"anchor &{_printable(event.anchor, EXCERPT_CHARS)}",
                    "YAML anchors and aliases are not allowed in a settings file",
                )
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise _Refused(line, "YAML", f"nested more than {MAX_DEPTH} levels deep")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_object(self, node, deep=False):
            try:
                return super().construct_object(node, deep)
            except (ValueError, TypeError, OverflowError) as e:  # e.g. int() of 5000 digits
                shown = excerpt(node.value) if isinstance(node, yaml.ScalarNode) else node.id
                raise _Refused(
                    node.start_mark.line + 1,
                    "YAML",
                    f"cannot read {shown}: {_printable(str(e).split(';')[0], 2 * EXCERPT_CHARS)}",
                ) from None

        def construct_mapping(self, node, deep=False):
            seen = set()
            if isinstance(node, yaml.MappingNode):
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    line = key_node.start_mark.line + 1
                    try:
                        hash(key)
                    except TypeError:
                        raise _Refused(line, "YAML", f"a key must be a name, not a {key_node.id}") from None
                    if not isinstance(key, str):  # `~:` is null, `1:` an int, `true:` a bool
                        shown = excerpt(key_node.value) if isinstance(key_node, yaml.ScalarNode) else key_node.id
                        what = "null" if key is None else "true/false" if isinstance(key, bool) else "a number"
                        raise _Refused(line, "YAML", f"a key must be a name, not {shown} ({what})")
                    if key in seen:
                        raise _Refused(line, _key_name(key), "duplicate key")
                    seen.add(key)
            return super().construct_mapping(node, deep)

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    _LOADER = Loader
    return Loader


def _key_lines(node: Any, prefix: str, lines: dict[str, int]) -> None:
    """Record the 1-based line of every mapping key under ``node`` as ``lines["a.b"]``."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                name = prefix + _key_name(key_node.value)
                lines.setdefault(name, key_node.start_mark.line + 1)
                _key_lines(value_node, name + ".", lines)


def _read_bytes(path: str) -> bytes:
    """The bytes of the regular file ``path``, at most :data:`MAX_FILE_BYTES`.

    The path is checked with ``stat`` before it is opened, and opened ``O_NONBLOCK``: a FIFO,
    a device or a directory is refused, never waited on (a FIFO's open blocks until a writer
    comes). ``fstat`` of the open file checks again (it may have been swapped meanwhile).

    Raises:
        ConfigError: not a regular file, too large, or unreadable (naming ``--config``).
    """
    shown = _shown(path)

    def check(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            kind = {
                stat.S_IFDIR: "a directory",
                stat.S_IFIFO: "a FIFO",
                stat.S_IFCHR: "a character device",
                stat.S_IFBLK: "a block device",
                stat.S_IFSOCK: "a socket",
            }
            raise ConfigError(
                "--config", f"not a regular file ({kind.get(stat.S_IFMT(st.st_mode), 'special file')})", shown
            )
        if st.st_size > MAX_FILE_BYTES:
            raise ConfigError(
                "--config", f"larger than {MAX_FILE_BYTES} bytes ({st.st_size}): not a settings file", shown
            )

    try:
        check(os.stat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            check(os.fstat(fd))
            chunks, size = [], 0
            while size <= MAX_FILE_BYTES:
                chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except OSError as e:
        raise ConfigError("--config", _printable(e.strerror or e), shown) from None
    except ValueError as e:  # a NUL byte in the path
        raise ConfigError("--config", f"not a usable path: {_printable(e)}", shown) from None
    if size > MAX_FILE_BYTES:  # it grew after the stat
        raise ConfigError("--config", f"larger than {MAX_FILE_BYTES} bytes: not a settings file", shown)
    return b"".join(chunks)


def read_file(path: str) -> tuple[dict[str, Any], dict[str, int]]:
    """``(data, lines)``: the settings mapping of the YAML file ``path`` (``{}`` when empty) and
    the 1-based line of each dotted key in it. Types and ranges are not checked here.

    Raises:
        ConfigError: the file is not a regular file, is over :data:`MAX_FILE_BYTES`, is not
            UTF-8, is not valid YAML, holds an anchor, an alias, nesting over :data:`MAX_DEPTH`,
            a value PyYAML cannot construct, an unhashable or duplicate key, or is not a mapping;
            naming ``path:LINE`` where the line is known.
    """
    raw = _read_bytes(path)
    shown = _shown(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError("--config", f"not a UTF-8 text file (byte {e.start})", f"{shown}:{line}") from None
    import yaml

    lines: dict[str, int] = {}
    loader = None
    try:
        loader = _loader_class()(text)  # checks every character first: may raise ReaderError
        node = loader.get_single_node()
        if node is None:
            return {}, {}
        _key_lines(node, "", lines)
        data = loader.construct_document(node)
    except _Refused as e:
        raise ConfigError(e.what, e.message, f"{shown}:{e.line}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "unreadable"
        raise ConfigError(
            "not valid YAML", _printable(problem, 2 * EXCERPT_CHARS), f"{shown}:{mark.line + 1}" if mark else shown
        ) from None
    except yaml.reader.ReaderError as e:  # a control character
        raise ConfigError(
            "not valid YAML",
            f"character #x{e.character:04x} is not allowed",
            f"{shown}:{text[: e.position].count(chr(10)) + 1}",
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError("not valid YAML", _printable(e, 2 * EXCERPT_CHARS), shown) from None
    except RecursionError:  # not expected with MAX_DEPTH, kept as a guard
        raise ConfigError("YAML", "nested too deeply", shown) from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(
            "(top level)",
            f"expected a mapping of settings (got {excerpt(data)})",
            f"{shown}:{node.start_mark.line + 1}",
        )
    return data, lines


def load(path: str | None, overrides: Mapping[str, Any], flags: Mapping[str, str] | None = None) -> Config:
    """Defaults, updated by the YAML file at ``path`` (if any), then by ``overrides``.

    ``overrides`` maps dotted keys (``"py_spy.native"``) to values already of the right type
    (``None``: not given). The file is validated alone first, so a bad value in it is blamed on
    the file and its line, never on a flag; a bad override is blamed on ``command line`` and
    its flag, ``flags[key]`` (``"--interval"``), or its key when ``flags`` has none. A file
    that uses old keys (:data:`DEPRECATED`) is read under the new ones, and one line on stderr
    names them (:func:`deprecation_line`), once its values are found valid.

    Raises:
        ConfigError: the file cannot be read or parsed (see :func:`read_file`), a value is
            invalid (see :func:`validate`), ``py_spy.path`` is not an executable file, or
            ``report_dir`` is a file (or lies under one), where no report could be written.
    """
    data: dict[str, Any] = {}
    cfg = Config()
    if path is not None:
        raw, lines = read_file(path)
        cfg = validate(raw, _shown(path), lines)
        data, lines, renamed = upgrade(raw, _shown(path), lines)
        _check_pyspy_path(cfg, _at(_shown(path), lines, "py_spy.path"))
        _check_report_dir(cfg, _at(_shown(path), lines, "report_dir"))
        if renamed:
            _say(deprecation_line(_shown(path), renamed, lines))
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return cfg
    for dotted, value in given.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    try:
        return validate(data, "command line")
    except ConfigError as e:
        flag = (flags or {}).get(e.key)
        if flag is None:
            raise
        raise ConfigError(flag, str(e).split(f"{e.key}: ", 1)[-1], "command line") from None


def _check_pyspy_path(cfg: Config, source: str) -> None:
    path = cfg.py_spy.path
    if path is not None and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError("py_spy.path", f"not an executable file: {excerpt(path)}", source)


def _check_report_dir(cfg: Config, source: str) -> None:
    try:
        argtypes.folder(cfg.report_dir)
    except argparse.ArgumentTypeError as e:
        raise ConfigError("report_dir", f"{e} ({excerpt(cfg.report_dir)})", source) from None


def defaults_as_dict() -> dict[str, Any]:
    """The built-in defaults as a plain nested dict (for ``config.yaml`` and its test)."""
    return Config().as_dict()
