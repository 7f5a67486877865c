"""The words are defined once, in views/vocabulary.py: no other module spells out a tuple, list or
set of them (phases, roles, kinds, stall families, stall reasons) that would drift from it."""
from __future__ import annotations

import ast
from pathlib import Path

from views import vocabulary

ROOT = Path(__file__).parents[1]
HOME = ROOT / "views" / "vocabulary.py"
WORDS = {
    "phases": set(vocabulary.PHASE_ORDER),
    "roles": set(vocabulary.KERNEL_ROLES),
    "kinds": set(vocabulary.KINDS),
    "stall families": set(vocabulary.STALL_FAMILIES),
    "stall reasons": {r for reasons in vocabulary.STALL_FAMILIES.values() for r in reasons},
}


def respelled(path: Path) -> list[str]:
    """`line: words (which)` for each literal tuple, list or set of two or more strings in `path`
    that are all words of one kind of the vocabulary."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < 2:
            continue
        if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            continue
        words = {e.value for e in node.elts}
        for which, known in WORDS.items():
            if words <= known:
                found.append(f"{node.lineno}: {', '.join(sorted(words))} ({which})")
                break
    return found


def test_no_module_spells_out_the_vocabulary_again():
    paths = [p for package in ("profiler", "views", "reports") for p in sorted((ROOT / package).rglob("*.py"))
             if p != HOME]
    found = [f"{p.relative_to(ROOT)}:{line}" for p in paths for line in respelled(p)]
    assert found == []


def test_the_finder_sees_a_copied_tuple(tmp_path):
    path = tmp_path / "copy.py"
    path.write_text('PREFILL = ("cold_prefill", "warm_prefill")\nx = ["memory", "sync"]\n'
                    'fine = ("memory", "dram_pct")\none = ("decode",)\n')
    assert respelled(path) == ["1: cold_prefill, warm_prefill (phases)", "2: memory, sync (stall families)"]
