"""What ``dlwatch verify`` checks before it starts anything (the rules the docstring of
:mod:`watchdog.commands.verify` states): the report is the caller's own and writable by no one
else (:func:`read_report`, :func:`origin_of`); the job may be started again as the caller
(:func:`check_rerunnable`: a known, unredacted command, the caller's uid, no program that
changes user, no unreplayable stdin or other mount namespace without ``--yes``); its working
directory and the entries its command names are places no other user can change
(:func:`trusted_place`: owner and mode of each entry met while resolving the path, links and
their folders included, the sticky bit as unlink(2) and rename(2) describe it), and the command
is run by their checked real paths (:func:`checked_command`); the report folder is such a place
(:func:`report_place`) and the verify folder is made in its real parent (:func:`verify_folder`);
the fix can work on this job (:func:`fix_cannot_apply`); and what the runs will not have that
the original had (:func:`differences`).
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


# The most symbolic links followed in one path (Linux's own limit, path_resolution(7): ELOOP).
MAX_LINKS = 40
# The most entries of a folder given as an argument that are looked at (the files Python runs
# from a folder on ``sys.path[0]``: ``__main__.py`` and the modules beside it).
MAX_FOLDER_ENTRIES = 10_000


def _refuse_entry(given: str, what: str, place: str, st: os.stat_result, last: bool) -> None:
    """Raise when another user could change ``place`` (``lstat`` ``st``), met while resolving
    ``given``: it is not the caller's or root's, or (a folder or file, not a link) it is
    writable by group or others, unless it is a folder above the end with the sticky bit.

    Raises:
        VerifyError: naming ``given``, ``place`` and why.
    """
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        raise VerifyError(
            given,
            f"{what}: {place} belongs to uid {st.st_uid}, not to you ({me}) or root: what it holds runs as you",
        )
    if stat.S_ISLNK(st.st_mode):
        return  # a link's own mode is never used (symlink(7)); its folder and target are checked
    shared = st.st_mode & 0o022
    if shared and (last or not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX)):
        raise VerifyError(
            given,
            f"{what}: {place} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): another user could "
            "change what runs as you; move the job into a folder of your own",
        )


def trusted_place(path: str, what: str) -> str:
    """The real path of ``path`` (the folder a run starts in, a file or folder its command names,
    the report folder), once it is clear that no other user can change what is found there.
    ``path`` is resolved here component by component, as path_resolution(7) does, and every
    entry met is checked with ``lstat``: the folders of the path as given, each link and the
    folders of its target, and the real path's: each belongs to the caller or to root; a folder
    above the end is writable by no one else, or has the sticky bit (others cannot rename or
    remove what is ours there: unlink(2), rename(2), EPERM); the end itself is writable by no
    one else. Group-writable counts as writable by others. No entry met can then be changed or
    re-pointed by another user, so the real path returned names what was checked, later too.

    Raises:
        VerifyError: naming ``path``, the entry at fault, and why (more than ``MAX_LINKS``
            links, a missing entry, one another user can change).
    """
    parts = [p for p in os.path.abspath(path).split("/") if p]
    real = "/"
    try:
        _refuse_entry(path, what, "/", os.lstat("/"), not parts)
    except OSError as e:
        raise VerifyError(path, f"cannot read {what} (/): {e.strerror or e}") from None
    links = 0
    while parts:
        name = parts.pop(0)
        if name == ".":
            continue
        if name == "..":
            real = os.path.dirname(real)
            continue
        place = os.path.join(real, name)
        try:
            st = os.lstat(place)
        except OSError as e:
            raise VerifyError(path, f"cannot read {what} ({place}): {e.strerror or e}") from None
        _refuse_entry(path, what, place, st, not parts and not stat.S_ISLNK(st.st_mode))
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise VerifyError(path, f"{what}: more than {MAX_LINKS} symbolic links")
            try:
                target = os.readlink(place)
            except OSError as e:
                raise VerifyError(path, f"cannot read {what} ({place}): {e.strerror or e}") from None
            if target.startswith("/"):
                real = "/"
            parts = [p for p in target.split("/") if p] + parts
            continue
        if parts and not stat.S_ISDIR(st.st_mode):
            raise VerifyError(path, f"cannot read {what} ({place}): not a folder")
        real = place
    try:  # the end once more as the end (a link to `..` ends on a folder met above it)
        _refuse_entry(path, what, real, os.lstat(real), True)
    except OSError as e:
        raise VerifyError(path, f"cannot read {what} ({real}): {e.strerror or e}") from None
    return real


def _interpreter_places(given: str, real: str) -> List[str]:
    """What decides what the program at ``given`` (real path ``real``) loads when it is a
    Python started from a virtual environment: ``pyvenv.cfg`` beside the binary or one folder up
    (Python looks there, from the path it was started as and from the real one: the ``venv``
    and ``site`` documentation, https://docs.python.org/3/library/site.html), that folder, and
    its ``lib*/python*/site-packages`` folders with their ``.pth`` files (each line starting
    ``import`` runs at start-up)."""
    import glob

    out: List[str] = []
    for binary in dict.fromkeys((given, real)):
        for home in (os.path.dirname(binary), os.path.dirname(os.path.dirname(binary))):
            cfg = os.path.join(home, "pyvenv.cfg")
            if not os.path.lexists(cfg):
                continue
            out += [home, cfg]
            for site in sorted(glob.glob(os.path.join(glob.escape(home), "lib*", "python*", "site-packages"))):
                out.append(site)
                out += sorted(glob.glob(os.path.join(glob.escape(site), "*.pth")))
    return list(dict.fromkeys(out))


def _folder_runs(folder: str) -> List[str]:
    """The files Python runs from ``folder`` given as its script (``python FOLDER``: its
    ``__main__.py``, with the folder first on ``sys.path``, so the modules beside it too:
    https://docs.python.org/3/using/cmdline.html#interface-options): each ``*.py``, ``*.pyc``,
    ``*.pth`` and ``*.so`` entry, and each package folder and ``__pycache__``, at most
    ``MAX_FOLDER_ENTRIES`` looked at."""
    out = []
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_FOLDER_ENTRIES:
                    break
                if entry.name.endswith((".py", ".pyc", ".pth", ".so")) or entry.name == "__pycache__":
                    out.append(entry.path)
                elif entry.is_dir(follow_symlinks=False) and os.path.lexists(os.path.join(entry.path, "__init__.py")):
                    out += [entry.path, os.path.join(entry.path, "__init__.py")]
    except OSError:
        return out
    return out


def _command_files(command: Sequence[str], cwd: str) -> List[Tuple[int, str, str]]:
    """``(index, argument, path)`` for each argument of ``command`` that names an existing entry
    (relative to ``cwd`` or absolute; a dangling link too), devices (``/dev/null``) left out:
    the program, its script (a file, a folder with ``__main__.py``, a zip file), its config
    files, folders it reads. A program named without a ``/`` is the one ``PATH`` finds
    (execvp(3))."""
    import shutil

    out = []
    for i, arg in enumerate(command):
        if not arg or arg.startswith("-"):
            continue
        if i == 0 and "/" not in arg:
            found = shutil.which(arg)
            if found:
                out.append((i, arg, os.path.abspath(found)))
            continue
        path = arg if os.path.isabs(arg) else os.path.join(cwd, arg)
        try:
            if stat.S_ISCHR(os.stat(path).st_mode) or stat.S_ISBLK(os.stat(path).st_mode):
                continue  # a device (/dev/null): never code, and root's 0666 by design
        except OSError:
            pass
        if os.path.lexists(path):
            out.append((i, arg, path))
    return out


def checked_command(command: Sequence[str], cwd: str) -> List[str]:
    """``command`` as the runs start it, once every entry it names can be trusted
    (:func:`trusted_place`, for each argument that names an existing entry: the path as given
    and the real one; for a folder, the files Python runs from it (:func:`_folder_runs`); for
    the program, its virtual environment (:func:`_interpreter_places`)). Each such argument is
    replaced by its real path, so no link swapped later changes what runs; the program keeps its
    own name in its real folder (a virtual environment's ``python`` is a link, and Python finds
    its ``pyvenv.cfg`` from the path it was started as).

    Raises:
        VerifyError: naming the argument and the entry at fault.
    """
    out = list(command)
    for i, arg, path in _command_files(command, cwd):
        what = f"the command's {'program' if i == 0 else 'file'} {redact.value(arg)!r}"
        real = trusted_place(path, what)
        if os.path.isdir(real):
            for inner in _folder_runs(real):
                trusted_place(inner, what)
        if i == 0:
            given = os.path.join(trusted_place(os.path.dirname(os.path.abspath(path)), what), os.path.basename(path))
            for place in _interpreter_places(given, real):
                trusted_place(place, f"{what} (its virtual environment)")
            out[i] = given
        else:
            out[i] = real
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
    checked_command(command, cwd)
    return cwd


def report_place(folder: str) -> str:
    """The real path of the report ``folder``, once no other user can move, replace or re-point
    it or anything on the way to it (:func:`trusted_place`: the folders of the path as given,
    each link and its target's folders, and the real path's). Everything verify reads and writes
    of the report afterwards (``report.json``, the verify folder, its ``settings.yaml``, the
    runs' folders and ``--config``, ``verify.json``) goes through this path, never the given one.

    Raises:
        VerifyError: naming the folder and the entry at fault.
    """
    try:
        return trusted_place(folder, "the report folder")
    except VerifyError as e:
        why = str(e)[len(one_line(f"{folder}: ")) :]
        raise VerifyError(
            folder,
            f"another user could move or replace the report or what verify writes beside it ({why}): move the "
            "report into a folder of your own",
        ) from None


def verify_folder(folder: str) -> str:
    """A new folder ``verify-<UTC time>-<pid>-<random>`` (0700) beside the report ``folder``,
    where nobody else can move or replace it: the report folder's path is checked again
    (:func:`report_place`) and the new folder is made in its real parent, whose every folder
    belongs to the caller or root and is writable by no one else, or sticky (``/tmp``'s: others
    cannot rename what is ours); its real path is returned.

    Raises:
        VerifyError: the report folder is not in such a place, or the new folder cannot be made.
    """
    import tempfile

    parent = os.path.dirname(report_place(folder))
    try:
        made = tempfile.mkdtemp(prefix=f"verify-{report.folder_name(time.time(), os.getpid())}-", dir=parent)
    except OSError as e:
        raise VerifyError(parent, f"cannot create the verify folder: {e.strerror or e}") from None
    return trusted_place(made, "the verify folder")


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
