"""The docs the code cites are in the repository, and docs/VIEWS.md describes every figure."""
from __future__ import annotations

import re
from pathlib import Path

from views import registry

ROOT = Path(__file__).parents[1]
SKIP = {".git", ".venv", "node_modules", "__pycache__", ".dev"}


def _skipped(parts: tuple) -> bool:
    """Folders that are not the project's (any .venv*, e.g. CI's .venv310)."""
    return bool(SKIP & set(parts)) or any(part.startswith(".venv") for part in parts)
TEXT = {".py", ".md", ".toml", ".yml", ".yaml", ".sh", ".txt", ".cfg"}
# `NAME.md` or `some/folder/NAME.md`, not part of a longer word or path
MENTION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[A-Z][A-Z0-9_]*\.md)\b")


def _files() -> list[Path]:
    """The repository's text files (this one aside: it names missing docs on purpose)."""
    return [p for p in ROOT.rglob("*") if p.suffix in TEXT and p.is_file() and p != Path(__file__)
            and not _skipped(p.relative_to(ROOT).parts)]


def test_every_doc_the_repository_mentions_is_in_it():
    names = {p.name for p in ROOT.rglob("*.md") if not _skipped(p.relative_to(ROOT).parts)}
    missing = []
    for path in _files():
        for mention in MENTION.findall(path.read_text(encoding="utf-8", errors="replace")):
            # a path from the repository's root or from the file's folder; a bare name anywhere
            found = ((ROOT / mention).is_file() or (path.parent / mention).is_file()
                     or ("/" not in mention and mention in names))
            if not found:
                missing.append(f"{path.relative_to(ROOT)}: {mention}")
    assert missing == []


def test_the_mention_finder_sees_a_doc_that_is_not_there():
    assert MENTION.findall("see docs/METHOD.md and NOTES.md, not x_METHOD.md or ../x/README.md") == \
        ["docs/METHOD.md", "NOTES.md", "../x/README.md"]
    assert not (ROOT / "docs/METHOD.md").exists()


def test_views_md_describes_every_figure_of_the_catalog():
    text = (ROOT / "docs" / "VIEWS.md").read_text(encoding="utf-8")
    missing = [c for c in registry.figures() if f"`{c}`" not in text]
    assert missing == []
    for view, module in registry.VIEWS.items():
        assert f"## {view} {module.TITLE}" in text
