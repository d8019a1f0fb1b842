"""Where bitforge writes, for every command that writes a folder (compile, flow, demo, learn, quantize, the bench
work folders) or a file (``emulate -o``): it never deletes what bitforge did not write.

* An output folder is written whole into a temporary folder beside it (``.OUT.tmp-PID-XXXXXXXX``) and renamed
  into place; the previous folder is renamed aside, the new one renamed in, the old one removed, and Ctrl-C or
  SIGTERM during the two renames is delivered just after them. A failed or interrupted run leaves the previous
  output as it was and no temporary folder.
* bitforge marks what it writes with ``.bitforge.json`` (command and version; no time stamp, so an output stays
  byte-identical for the same inputs). A non-empty folder without it is refused unless ``force``, which
  replaces it (its files are deleted). ``/``, the home folder, the current folder and its parents, and any
  folder that is or holds an input are refused, ``force`` or not.
* ``-o LINK`` (a symbolic link to a folder) writes the folder the link points to, under the same rules: the
  link stays and points to the new output. A link that points nowhere is refused.
* Temporary folders carry the pid of their run: the next run beside them removes those of dead runs (killed
  with SIGKILL), and puts back a previous output that a kill caught between the two renames.
* Output folders get the user's normal permissions (the umask), not ``mkdtemp``'s 0700.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import signal
import stat
import threading
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Sequence, Union

from .errors import OutputError
from .version import bitforge_version

PathLike = Union[str, os.PathLike]

MARKER = ".bitforge.json"
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<role>tmp|old)-(?P<pid>\d+)-[0-9a-f]{8}$")
#: Bytes a temporary or failed name adds to OUT's name: "." + ".failed" + ".old-" + pid (<= 7 digits) + "-" + 8.
NAME_RESERVE = 1 + 7 + 5 + 7 + 1 + 8
#: Room kept below the path length limit for the files a command writes inside OUT (impl/<target>/...).
PATH_RESERVE = 120
_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: ``--force``'s help, the same for every command that writes a folder.
FORCE_HELP = ("replace OUT even if it is a non-empty folder bitforge did not write (no .bitforge.json): its files "
              "are deleted. Never allowed for /, your home folder, the current folder or its parents, or a folder "
              "holding an input. Without it such a folder is refused (exit 2); an earlier bitforge output is "
              "always replaced")


def marker(kind: str) -> dict:
    """The marker's content: what wrote the folder. No time or host, so outputs stay byte-reproducible."""
    return {"written_by": "bitforge", "command": kind, "version": bitforge_version()}


def write_marker(folder: Path, kind: str) -> None:
    (Path(folder) / MARKER).write_text(json.dumps(marker(kind), indent=2) + "\n")


def is_bitforge_output(folder: PathLike) -> bool:
    """True when ``folder`` carries bitforge's marker (a folder bitforge may replace or remove)."""
    try:
        return json.loads((Path(folder) / MARKER).read_text()).get("written_by") == "bitforge"
    except (OSError, ValueError, AttributeError):
        return False


# -- checking a path ------------------------------------------------------------------------------------------

def _real(path: PathLike) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


def _shown(text: str, real: Path) -> str:
    return text if Path(os.path.abspath(text)) == real else f"{text} (= {real})"


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def _refuse_protected(real: Path, shown: str, option: str, inputs: Sequence[PathLike]) -> None:
    """The folders no output may replace, whatever ``force`` says."""
    why = None
    if real == Path(real.anchor):
        why = "is the root folder"
    home = None
    with contextlib.suppress(RuntimeError, KeyError):
        home = _real(Path.home())
    cwd = _real(os.getcwd())
    if why is None and home is not None and _inside(home, real):
        why = "is your home folder" if real == home else f"holds your home folder {home}"
    if why is None and _inside(cwd, real):
        why = "is the current folder" if real == cwd else f"holds the current folder {cwd}"
    for given in inputs:
        if why is None and given is not None and os.fspath(given):
            source = _real(given)
            if _inside(source, real):
                why = f"is the input {given}" if source == real else f"holds the input {given}"
    if why is not None:
        raise OutputError(f"{option} {shown} {why}; bitforge replaces its output folder as a whole, so it never "
                          f"writes there (--force does not change this). Choose a new folder, e.g. {option} "
                          "out/NAME")


def _existing_ancestor(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _pathconf(path: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(path, name))
    except (OSError, ValueError):
        return default


def _check_room(real: Path, shown: str, option: str, reserve: int, extra: int) -> Path:
    """The folder that will hold ``real`` exists or can be made, is writable, and names fit; returns the
    existing ancestor the new parts go into."""
    anc = _existing_ancestor(real.parent)
    if not anc.is_dir():
        raise OutputError(f"{option} {shown}: {anc} is a file, not a folder, so nothing can be created inside it; "
                          "choose another path")
    if not os.access(anc, os.W_OK | os.X_OK):
        ro = bool(os.statvfs(anc).f_flag & os.ST_RDONLY)
        raise OutputError(f"{option} {shown}: cannot write in {anc} ("
                          + ("a read-only file system" if ro else "permission denied")
                          + "); choose a folder you can write, e.g. one under your home folder")
    name_max = _pathconf(anc, "PC_NAME_MAX", 255)
    path_max = _pathconf(anc, "PC_PATH_MAX", 4096)
    new = real.relative_to(anc).parts
    for part in new[:-1]:
        if len(os.fsencode(part)) > name_max:
            raise OutputError(f"{option} {shown}: the folder name {part[:40]}... is {len(os.fsencode(part))} bytes "
                              f"long; this file system allows at most {name_max}. Choose a shorter name")
    final = len(os.fsencode(real.name))
    if final > name_max - reserve:
        raise OutputError(f"{option} {shown}: the name {real.name[:40]}... is {final} bytes long; this file "
                          f"system allows {name_max}, and bitforge needs {reserve} more for the temporary name "
                          f"beside it: keep it to {name_max - reserve} bytes")
    if len(os.fsencode(str(real))) + reserve + extra > path_max:
        raise OutputError(f"{option} {shown}: the path is {len(os.fsencode(str(real)))} bytes long; with the "
                          f"files bitforge writes inside it, it would pass this system's limit of {path_max}. "
                          "Choose a shorter path")
    return anc


def _foreign_entries(folder: Path) -> list[str]:
    """The entries of a folder bitforge may not replace: all of them when it has no marker."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [] if not names or is_bitforge_output(folder) else names


def check_output(out: PathLike, *, force: bool = False, inputs: Sequence[PathLike] = (),
                 option: str = "-o") -> Path:
    """Refuse, before any work, an output folder bitforge must not write; returns the real path it will write.

    ``inputs`` are the files or folders the command reads (the model): OUT may not be or hold one.
    ``force`` lets a non-empty folder without bitforge's marker be replaced (its files are deleted); it
    never applies to the protected folders. ``option`` names the flag in messages."""
    text = os.fspath(out)
    if not text.strip():
        raise OutputError(f"{option} is empty: name the output folder, e.g. {option} out/NAME")
    if os.path.islink(text) and not os.path.exists(text):
        raise OutputError(f"{option} {text}: a symbolic link to {os.readlink(text)}, which does not exist; give the "
                          "folder itself or fix the link")
    real = _real(text)
    shown = _shown(text, real)
    _refuse_protected(real, shown, option, inputs)
    if os.path.lexists(real):
        if not real.is_dir():
            raise OutputError(f"{option} {shown}: exists and is a file, not a folder; choose another path (bitforge "
                              "does not replace a file with its output folder, --force or not)")
        foreign = _foreign_entries(real)
        if foreign and not force:
            listed = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise OutputError(f"{option} {shown}: a folder bitforge did not write (no {MARKER}) holding {listed}; "
                              "bitforge replaces its output folder as a whole and will not delete them. Choose a "
                              "new folder, or pass --force to replace it and delete its contents (an output of "
                              "bitforge 0.1.0 or earlier has no marker either)")
    _check_room(real, shown, option, NAME_RESERVE, PATH_RESERVE)
    return real


# -- signals and removal --------------------------------------------------------------------------------------

@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM or SIGHUP inside the block is delivered when it ends (between two renames it would leave
    no OUT at all). Only the main thread can hold them; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {}
    try:
        for s in _HELD_SIGNALS:
            if signal.getsignal(s) is not signal.SIG_IGN:
                previous[s] = signal.signal(s, lambda n, f: pending.append(n))
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def discard(folder: PathLike) -> None:
    """Remove a folder bitforge wrote (it carries the marker, or is empty); anything else is an error."""
    folder = Path(folder)
    if not os.path.lexists(folder):
        return
    if folder.is_symlink() or not folder.is_dir() or _foreign_entries(folder):
        raise OutputError(f"{folder}: not a folder bitforge wrote (no {MARKER}); not removing it")
    with _signals_held():
        _remove(folder)


# -- temporary names and stale ones ---------------------------------------------------------------------------

def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:  # a zombie (killed, not yet reaped by its parent) is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _temp_name(real: Path, role: str) -> Path:
    return real.with_name(f".{real.name}.{role}-{os.getpid()}-{secrets.token_hex(4)}")


def clean_stale(parent: PathLike) -> list[Path]:
    """Remove the temporary folders and files of dead bitforge runs in ``parent``; a previous output renamed
    aside by a run killed before it renamed the new one in is put back. Returns what was removed."""
    parent = Path(parent)
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    removed = []
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m is None or _pid_alive(int(m["pid"])) or entry.is_symlink():
            continue
        path = Path(entry.path)
        final = parent / m["name"]
        if m["role"] == "old" and not os.path.lexists(final):
            with contextlib.suppress(OSError):
                os.rename(path, final)
            continue
        if m["role"] == "tmp" and entry.is_dir() and _foreign_entries(path):
            continue  # our name, but not our content: leave it
        _remove(path)
        removed.append(path)
    return removed


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns those created (outermost first)."""
    missing = []
    p = folder
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    for p in reversed(missing):
        try:
            p.mkdir()
        except FileExistsError:
            pass
        except OSError as e:
            raise OutputError(f"cannot create {p}: {e.strerror}") from None
    return list(reversed(missing))


def _remove_empty(created: list[Path]) -> None:
    for p in reversed(created):
        with contextlib.suppress(OSError):
            p.rmdir()


def _new_folder(real: Path) -> Path:
    for _ in range(100):
        tmp = _temp_name(real, "tmp")
        try:
            os.mkdir(tmp, 0o777)  # the umask applies: the user's normal permissions
            return tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise OutputError(f"cannot create a temporary folder beside {real}: {e.strerror}") from None
    raise OutputError(f"cannot create a temporary folder beside {real}")


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask sets it, for a moment, for every thread)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a plain ``open()`` would give a new file here (0o666 less the umask): for files made through
    ``tempfile.mkstemp``, which creates them 0o600, so that a report is as readable as any other file written."""
    return 0o666 & ~_umask()


def _normal_permissions(folder: Path) -> None:
    """Give group and others what the owner has, less the umask: some writers (safetensors) make their files
    0600, as ``mkdtemp`` made the temporary folder 0700; an output is an ordinary file of the user's."""
    umask = _umask()

    def fix(path: str) -> None:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return
        mode = stat.S_IMODE(st.st_mode)
        owner = mode & 0o700
        want = mode | ((owner >> 3 | owner >> 6) & ~umask & 0o077)
        if want != mode:
            os.chmod(path, want)

    fix(str(folder))
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            fix(os.path.join(root, name))


# -- replacing ------------------------------------------------------------------------------------------------

def _swap(staged: Path, real: Path) -> None:
    """``staged`` becomes ``real`` with renames only; the previous ``real`` is removed after, or put back."""
    old = None
    try:
        with _signals_held():  # a signal held here is raised as the block ends: the finally still removes old
            if os.path.lexists(real):
                aside = _temp_name(real, "old")
                os.rename(real, aside)
                old = aside
            try:
                os.rename(staged, real)
            except BaseException:
                if old is not None:
                    os.rename(old, real)
                    old = None
                raise
    except OSError as e:
        busy = e.errno in (errno.EBUSY, errno.EXDEV)
        raise OutputError(f"cannot put the output in place at {real}: {e.strerror}"
                          + ("; it is a mount point, choose a folder inside it" if busy else "")) from None
    finally:
        if old is not None:
            with _signals_held():
                _remove(old)


def install(staged: PathLike, out: PathLike, *, force: bool = False, inputs: Sequence[PathLike] = (),
            option: str = "-o") -> Path:
    """Put a finished folder (bitforge's: it carries the marker) in place of ``out``, under the rules of
    :func:`check_output`; returns the real path written."""
    staged = Path(staged)
    if not is_bitforge_output(staged):
        raise OutputError(f"{staged}: not a folder bitforge wrote (no {MARKER}); not installing it as {out}")
    real = check_output(out, force=force, inputs=inputs, option=option)
    clean_stale(real.parent)
    _make_parents(real.parent)
    _swap(staged, real)
    return real


@contextlib.contextmanager
def output_folder(out: PathLike, *, kind: str, force: bool = False, inputs: Sequence[PathLike] = (),
                  option: str = "-o") -> Iterator[Path]:
    """Write an output folder: yields an empty temporary folder beside ``out`` (already marked as ``kind``'s
    output); when the block ends normally it replaces ``out``, when it raises (an error, Ctrl-C, SIGTERM) it is
    removed and ``out`` is as it was. The rules are :func:`check_output`'s, checked again before the swap."""
    real = check_output(out, force=force, inputs=inputs, option=option)
    created = _make_parents(real.parent)
    clean_stale(real.parent)
    try:
        tmp = _new_folder(real)
    except BaseException:
        _remove_empty(created)
        raise
    try:
        write_marker(tmp, kind)
        yield tmp
        _normal_permissions(tmp)
        check_output(out, force=force, inputs=inputs, option=option)  # the folder may have changed meanwhile
        _swap(tmp, real)
    except BaseException:
        with _signals_held():
            if os.path.lexists(tmp):
                _remove(tmp)
            _remove_empty(created)
        raise


def keep_failed(staged: PathLike, out: PathLike) -> Path:
    """Move a staged folder whose verification failed to ``OUT.failed`` (the artefacts of a bug report),
    replacing an earlier one bitforge wrote; a foreign ``OUT.failed`` is left alone and ``OUT.failed-2``, ...
    used instead. Returns where the folder went."""
    real = _real(out)
    for n in range(1, 1000):
        failed = real.with_name(f"{real.name}.failed" + (f"-{n}" if n > 1 else ""))
        if not os.path.lexists(failed) or (failed.is_dir() and not failed.is_symlink()
                                           and not _foreign_entries(failed)):
            break
    clean_stale(failed.parent)
    _swap(Path(staged), failed)
    return failed


def relocate(exc: BaseException, staged: PathLike, final: PathLike) -> BaseException:
    """Rewrite the temporary folder's path into the final one in an error's message (and its ``log``), for an
    error raised while writing into the temporary folder and reported after the folder was put in place."""
    a, b = str(staged), str(final)
    exc.args = tuple(x.replace(a, b) if isinstance(x, str) else x for x in exc.args)
    log = getattr(exc, "log", None)
    if isinstance(log, (str, Path)) and a in str(log):
        with contextlib.suppress(AttributeError):
            exc.log = type(log)(str(log).replace(a, b))
    return exc


# -- files ----------------------------------------------------------------------------------------------------

def check_file(path: PathLike, *, inputs: Sequence[PathLike] = (), option: str = "-o") -> Path:
    """The checks of :func:`write_file`, for a command to run before its long work: an empty name, a folder, an
    input, a path too long. Returns the real path."""
    text = os.fspath(path)
    if not text.strip():
        raise OutputError(f"{option} is empty: name the output file")
    real = _real(text)
    shown = _shown(text, real)
    if real.is_dir():
        raise OutputError(f"{option} {shown}: is a folder; name a file")
    for given in inputs:
        source = _real(given)
        if real == source:
            raise OutputError(f"{option} {shown}: is the input {given}; writing it would destroy the input. Choose "
                              "another file name")
    _check_room(real, shown, option, NAME_RESERVE, 0)
    return real


def write_file(path: PathLike, write: Callable[[BinaryIO], None], *, inputs: Sequence[PathLike] = (),
               option: str = "-o") -> Path:
    """Write a file through a temporary file beside it and a rename: readers see the old file or the new one,
    never half. Refuses a path that is a folder or is one of ``inputs``. Returns the real path written."""
    real = check_file(path, inputs=inputs, option=option)
    created = _make_parents(real.parent)
    clean_stale(real.parent)
    tmp = _temp_name(real, "tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            write(f)
        with _signals_held():
            os.replace(tmp, real)
    except BaseException:
        with _signals_held():
            _remove(tmp)
            _remove_empty(created)
        raise
    return real
