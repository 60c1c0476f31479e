"""What ``dlwatch verify`` checks before it starts anything (the rules the docstring of
:mod:`watchdog.commands.verify` states): the report is the caller's own and writable by no one
else (:func:`read_report`, :func:`origin_of`); the job may be started again as the caller
(:func:`check_rerunnable`: a known, unredacted command, the caller's uid, no program that
changes user, no unreplayable stdin or other mount namespace without ``--yes``); its working
directory and the files its command names are places no other user can change
(:func:`trusted_place`: owner and mode of each folder above, the sticky bit as unlink(2) and
rename(2) describe it); the verify folder is made where nobody else can move it
(:func:`verify_folder`); the fix can work on this job (:func:`fix_cannot_apply`); and what the
runs will not have that the original had (:func:`differences`).
"""

from __future__ import annotations

import os
import stat
import time
from typing import List, Optional, Sequence, Tuple

from .. import redact
from ..collect import launch, script
from ..report import browse
from ..report import document as report
from ..text import one_line
from ..types import Fix
from .verify_plan import Origin, VerifyError, origin_from

# A report.json larger than this is not one dlwatch wrote (its timeline is bounded).
MAX_REPORT_BYTES = 64 * 2**20
# Programs that start what follows them as another user (or in another root): a job started
# through one ran as that user, whatever uid ``dlwatch run`` had, and verify refuses to start it
# again as the caller.
USER_CHANGERS = frozenset(
    {
        "runuser",
        "su",
        "sudo",
        "doas",
        "setpriv",
        "gosu",
        "su-exec",
        "setuidgid",
        "s6-setuidgid",
        "chpst",
        "chroot",
        "nsenter",
        "capsh",
        "machinectl",
        "systemd-run",
        "pkexec",
    }
)


def _owned(path: str, what: str) -> os.stat_result:
    """``lstat`` of ``path``, which must be this user's and writable by no one else.

    Raises:
        VerifyError: a link, another user's, or writable by group or others.
    """
    try:
        st = os.lstat(path)
    except OSError as e:
        raise VerifyError(path, f"cannot read {what}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise VerifyError(path, f"{what} is a symbolic link: name the report folder itself")
    if st.st_uid != os.geteuid():
        raise VerifyError(
            path, f"{what} belongs to uid {st.st_uid}, not to you ({os.geteuid()}): verify runs only your own reports"
        )
    if st.st_mode & 0o022:
        raise VerifyError(path, f"{what} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): not trusted")
    return st


def read_report(folder: str) -> dict:
    """``report.json`` of ``folder``, read only when it can be trusted to say what to run: the
    folder and the file are this user's, writable by no one else, the file a regular one (no
    link, FIFO or device) of at most ``MAX_REPORT_BYTES``.

    Raises:
        VerifyError: naming the folder or file and why.
    """
    _owned(folder, "the report folder")
    path = os.path.join(folder, "report.json")
    try:  # O_NOFOLLOW|O_NONBLOCK, fstat: a regular file, capped (the reader of every report file)
        data, st = browse.read_capped(path, MAX_REPORT_BYTES)
    except OSError as e:
        raise VerifyError(path, f"cannot open: {e.strerror or e}") from None
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise VerifyError(path, "not yours, or writable by others: not trusted")
    try:
        doc = browse.parse_json(data)  # nested too deep is a ValueError, never a RecursionError
    except ValueError as e:
        raise VerifyError(path, f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise VerifyError(path, "not a dlwatch report (not a JSON object)")
    return doc


def origin_of(folder: str) -> Origin:
    """The :class:`Origin` of the report in ``folder`` (:func:`read_report`).

    Raises:
        VerifyError: the report cannot be trusted or read, is malformed (naming the field), or
            is not of a hang or a crash.
    """
    doc = read_report(folder)
    try:
        return origin_from(folder, doc)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
        raise VerifyError(os.path.join(folder, "report.json"), f"malformed: {e}") from None


def trusted_place(path: str, what: str) -> str:
    """The real path of ``path`` (the folder a run starts in, or a file its command names),
    once it is clear that no other user can change what is found there: ``path`` and every
    folder above it belong to the caller or to root; ``path`` is writable by no one else; each
    folder above it is writable by no one else, or has the sticky bit (others cannot rename or
    remove what is ours there: unlink(2), rename(2), EPERM). Group-writable counts as writable
    by others. Links are resolved first, and the runs use the real path, so a link swapped
    later changes nothing.

    Raises:
        VerifyError: naming ``path``, the folder or file at fault, and why.
    """
    real = os.path.realpath(path)
    me = os.geteuid()
    chain = [real]
    while chain[-1] != os.path.dirname(chain[-1]):
        chain.append(os.path.dirname(chain[-1]))
    for place in reversed(chain):
        try:
            st = os.lstat(place)
        except OSError as e:
            raise VerifyError(path, f"cannot read {what} ({place}): {e.strerror or e}") from None
        if stat.S_ISLNK(st.st_mode):
            raise VerifyError(path, f"{what}: {place} changed while it was checked (now a link)")
        if st.st_uid not in (me, 0):
            raise VerifyError(
                path,
                f"{what}: {place} belongs to uid {st.st_uid}, not to you ({me}) or root: what it holds runs as you",
            )
        shared = st.st_mode & 0o022
        if shared and (place == real or not st.st_mode & stat.S_ISVTX):
            raise VerifyError(
                path,
                f"{what}: {place} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): another user could "
                "change what runs as you; move the job into a folder of your own",
            )
    return real


def _command_files(command: Sequence[str], cwd: str) -> List[Tuple[str, str]]:
    """``(argument, path)`` for each argument of ``command`` that names an existing file
    (relative to ``cwd`` or absolute): the program, its script, its config files."""
    out = []
    for arg in command:
        if not arg or arg.startswith("-"):
            continue
        path = arg if os.path.isabs(arg) else os.path.join(cwd, arg)
        if os.path.isfile(path):
            out.append((arg, path))
    return out


def check_rerunnable(origin: Origin, command: Sequence[str], yes: bool) -> str:
    """Refuse what must not be re-run (see :mod:`watchdog.commands.verify`'s docstring); returns
    the real path of the working directory the runs start in (:func:`trusted_place`).

    Raises:
        VerifyError: naming the report (or the folder or file at fault) and why.
    """
    if not command:
        raise VerifyError(origin.folder, "the report does not say how the job was started: pass it after --")
    if any(redact.REDACTED in a for a in command):
        raise VerifyError(
            origin.folder,
            "the job's command held a secret, redacted in the report: pass the command after -- (dlwatch verify "
            "REPORT -- CMD ARGS…)",
        )
    if origin.uid is not None and origin.uid != os.getuid():
        raise VerifyError(
            origin.folder, f"the job ran as uid {origin.uid}, not as you ({os.getuid()}): run verify as it"
        )
    changer = os.path.basename(command[0])
    if changer in USER_CHANGERS:
        raise VerifyError(
            origin.folder,
            f"the job was started through {changer}, as another user: run verify as that user, with the command "
            "after -- (dlwatch verify REPORT -- CMD ARGS…)",
        )
    if origin.cwd is None or not os.path.isdir(origin.cwd):
        raise VerifyError(origin.folder, f"the job's working directory {origin.cwd!r} is not there")
    if origin.watched_by == "attach" and not yes:
        raise VerifyError(
            origin.folder,
            "this report came from `dlwatch attach`: its command line may not start the job as it was started "
            "(a launcher, a container entry point); check it, then add --yes",
        )
    _, own_ns, _ = launch.context()
    if origin.stdin in ("file", "pipe", "socket") and not yes:
        raise VerifyError(
            origin.folder,
            f"the original read its standard input from a {origin.stdin}, which verify cannot replay (the runs get "
            "/dev/null): check that the job does not need it, then add --yes",
        )
    if origin.mount_ns and own_ns and origin.mount_ns != own_ns and not yes:
        raise VerifyError(
            origin.folder,
            f"the original ran in another mount namespace ({origin.mount_ns}; verify runs in {own_ns}: a container "
            "or unshare): its files and mounts are not these, and what the runs write lands on this one's disks; "
            "run verify in that namespace, or add --yes",
        )
    cwd = trusted_place(origin.cwd, "the job's working directory")
    for arg, path in _command_files(command, cwd):
        trusted_place(path, f"the command's file {redact.value(arg)!r}")
    return cwd


def verify_folder(folder: str) -> str:
    """A new folder ``verify-<UTC time>-<pid>-<random>`` (0700) beside the report ``folder``,
    where nobody else can move or replace it: its parent must be this user's (or root's) and
    writable by no one else, or carry the sticky bit (``/tmp``'s: others cannot rename what is
    ours).

    Raises:
        VerifyError: the parent is not such a folder, or the new folder cannot be made.
    """
    import tempfile

    parent = os.path.dirname(folder)
    try:
        st = os.stat(parent)
    except OSError as e:
        raise VerifyError(parent, f"cannot read it: {e.strerror or e}") from None
    others_write = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX
    if st.st_uid not in (os.geteuid(), 0) or others_write:
        raise VerifyError(
            parent,
            "another user could move or replace what verify writes here (not yours, or writable by others without "
            "the sticky bit): move the report into a folder of your own",
        )
    try:
        return tempfile.mkdtemp(prefix=f"verify-{report.folder_name(time.time(), os.getpid())}-", dir=parent)
    except OSError as e:
        raise VerifyError(parent, f"cannot create the verify folder: {e.strerror or e}") from None


def fix_cannot_apply(origin: Origin, fix: Fix) -> Optional[str]:
    """Why ``fix`` cannot work on this job, known before any run, or ``None``: a start method
    that re-imports the main script (``forkserver``, ``spawn``) for a DataLoader iterated at
    the top level of a script with no main guard around it (:func:`watchdog.collect.script.unguarded_site`)."""
    method = dict(fix.loader).get("multiprocessing_context")
    if method not in ("forkserver", "spawn"):
        return None
    unguarded = [site for site in origin.module_sites if script.unguarded_site(site)]
    if not unguarded:
        return None
    return (
        f"multiprocessing_context={method!r} cannot work on this job: the DataLoader is iterated at the top level of "
        f'{unguarded[0]} with no `if __name__ == "__main__":` around it, so each {method} worker imports the '
        "script again and runs the loop itself. Put the loop under a main guard, or take the report's other remedy "
        "(create the lock, pool or client in the worker: worker_init_fn, or lazily in __getitem__)"
    )


def differences(origin: Origin) -> List[str]:
    """Lines that say, before any run, what the runs will not have that the original had: a
    terminal on stdin (the runs get ``/dev/null``), another mount namespace (allowed with
    ``--yes``), another cgroup (its memory and pids limits may differ)."""
    _, own_ns, own_cgroup = launch.context()
    out = []
    if origin.stdin == "terminal":
        out.append("note: the original had a terminal on stdin; the runs get /dev/null")
    elif origin.stdin in ("file", "pipe", "socket"):
        out.append(f"note: the original read stdin from a {origin.stdin}; the runs get /dev/null")
    if origin.mount_ns and own_ns and origin.mount_ns != own_ns:
        out.append(
            f"note: the original ran in another mount namespace ({origin.mount_ns}); the runs read and write this "
            f"one's ({own_ns}) files and disks"
        )
    if origin.cgroup and own_cgroup and origin.cgroup != own_cgroup:
        out.append(
            f"note: the original ran in cgroup {redact.value(origin.cgroup)}, the runs in {redact.value(own_cgroup)}: "
            "their memory and pids limits may differ, and with them an out-of-memory or a failed fork"
        )
    return [one_line(line) for line in out]
