"""Checks of option values every command shares: the files an option names (read, written, a
folder), and numbers. Each refusal is a BadInput naming the option and what to give instead."""
from __future__ import annotations

import math
import os
import stat
from pathlib import Path

from profiler.errors import BadInput


def check_regular_file(path, label: str) -> None:
    """An input that is a file (or a folder, which the caller refuses in its own words), not a pipe
    or a device: /dev/zero never ends, and a pipe cannot be read twice (a capture is hashed, then
    read)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # the reader says what is wrong with it
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise BadInput(f"{label}: is a pipe or a device, not a file; save it to a file first")


def read_option_file(path, option: str) -> str:
    """The UTF-8 text of the file an option names (--shapes, --rules, --metrics @FILE)."""
    path = Path(path)
    check_regular_file(path, f"{option} {path}")
    if not path.is_file():
        raise BadInput(f"{option} {path}: " + ("is a folder, not a file" if path.is_dir() else "no such file"))
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as err:
        raise BadInput(f"{option} {path}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{option} {path} is not UTF-8 text: re-encode it, e.g. iconv -t utf-8") from None


# The names of standard output: a report may go there (`report -o - | gzip`), written straight to
# the process's stdout; never opened by name, which truncates a `>> log`, or replaced by a rename,
# which would swap the /dev/stdout link itself for a file.
STDOUT_PATHS = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def is_stdout(path) -> bool:
    return path is not None and str(path) in STDOUT_PATHS


def check_output_file(path, option: str, store=None, stdout_ok: bool = False) -> None:
    """A file an option writes (-o, --markdown, --junit): not a folder, a pipe or a device, and not
    inside the store, whose files only the store's own atomic writes may replace. Standard output
    where the command says it can go there."""
    if is_stdout(path):
        if stdout_ok:
            return
        raise BadInput(f"{option} {path}: this command prints to standard output itself; give a file")
    path = Path(path)
    # /dev/stderr, /dev/fd/N: the file behind may be a regular one, but a rename onto the name would
    # replace the link in /dev itself
    if path.absolute().parent in (Path("/dev"), Path("/dev/fd")) or \
            any(str(p).startswith("/proc/") for p in (path.absolute(), path.resolve())):
        raise BadInput(f"{option} {path}: names a device or an open file of a process, not a file; "
                       "give a file (or - for standard output, where the command allows it)")
    if path.is_dir():
        raise BadInput(f"{option} {path} is a folder: give a file name, e.g. {option} {path / 'out'}")
    # a report is written beside and renamed into place: that would replace /dev/null itself
    check_regular_file(path, f"{option} {path}")
    if store is None or "://" in str(store):
        return
    inside = Path(path).resolve()
    if inside == Path(store).resolve() or Path(store).resolve() in inside.parents:
        raise BadInput(f"{option} {path} is inside the store {store}: write it somewhere else")


def check_folder_option(path, option: str) -> None:
    """A folder an option names, made when needed (--keep): not an existing file."""
    path = Path(path)
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            where = "" if part == path else f" (its {part})"
            raise BadInput(f"{option} {path}{where} is a file, not a folder: give a folder")


def check_positive_number(value: float | None, option: str) -> None:
    """A number of seconds, tokens, ... that must be finite and above 0 when given."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise BadInput(f"{option} {value}: give a number above 0")
