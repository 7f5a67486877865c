"""docs/ARCHITECTURE.md's rooms are the tree as it is: every file it names exists, and every module
of commands/, profiler/, views/ and reports/ is named there (or sits in a folder it names without listing its
files)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("commands", "profiler", "views", "reports")


def rooms(text: str) -> tuple[set[str], set[str]]:
    """The files and folders the rooms block names, as paths from the repository's root.

    An entry opens a line: one name or several separated by commas (a folder ends in `/`), then two
    spaces or more before what it is. Its indent (two spaces a level) puts it inside the folder above.
    Lines that continue a description open with words, not names, and are passed over."""
    block = text.split("## The rooms", 1)[1].split("```")[1]
    files, folders, stack = set(), set(), []
    for line in block.splitlines()[1:]:
        names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split(", ") if line.strip() else []
        if not names or not all(re.fullmatch(r"[\w.]+(\.py|/)", n) for n in names):
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        stack = stack[:depth]
        for name in names:
            path = "".join(stack) + name
            (folders if name.endswith("/") else files).add(path)
        if names[-1].endswith("/"):
            stack.append(names[-1])
    return files, folders


def unnamed(files: set[str], folders: set[str]) -> list[str]:
    """The modules that neither the doc names nor sit in a folder it names without listing any of
    that folder's own files (a package described as one room)."""
    listed_in = {f.rsplit("/", 1)[0] + "/" for f in files}
    whole = {d for d in folders if d.count("/") > 1 and d not in listed_in}
    modules = [p.relative_to(ROOT).as_posix() for package in PACKAGES for p in (ROOT / package).rglob("*.py")
               if p.name != "__init__.py"]
    return sorted(m for m in modules if m not in files and not any(m.startswith(d) for d in whole))


def test_the_rooms_name_every_module_and_only_modules_that_exist():
    files, folders = rooms((ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert sorted(f for f in files if not (ROOT / f).is_file()) == []
    assert sorted(d for d in folders if not (ROOT / d).is_dir()) == []
    assert unnamed(files, folders) == []


def test_the_reader_follows_the_indent_and_sees_a_module_left_out():
    text = ("## The rooms\n```\nprofiler/\n  cli.py          the joint\n  ingest/         capture files\n"
            "    store.py, merge.py   the store\n                  and more words.py here\n"
            "  run/\n    annotate/     injected (runtime.py)\nviews/\n  gap.py\n```\n")
    files, folders = rooms(text)
    assert files == {"profiler/cli.py", "profiler/ingest/store.py", "profiler/ingest/merge.py", "views/gap.py"}
    assert folders == {"profiler/", "profiler/ingest/", "profiler/run/", "profiler/run/annotate/", "views/"}
    left_out = unnamed(files, folders)
    assert "profiler/ingest/capture.py" in left_out and "views/registry.py" in left_out
    assert not any(m.startswith("profiler/run/annotate/") for m in left_out)  # a room of its own
