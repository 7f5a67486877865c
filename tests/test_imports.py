"""Data flows one way: profiler -> views -> reports, and profiler/cli.py is the one joint.

Every import of every module is read (function-local ones too): views imports nothing from
profiler or reports; reports nothing from profiler; profiler nothing from reports, and of views
only the pure parsers (the vocabulary and the kernel-name parser), which import no other view.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
JOINT = "profiler/cli.py"
PURE_VIEWS = {"views.vocabulary", "views.kernel_names"}  # what the profiler may read of views


def imports(path: Path) -> set[str]:
    """The modules `path` imports anywhere in it; `from views import registry` is views.registry."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            found.add(node.module)
            if node.module in ("profiler", "views", "reports"):
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def broken(package: str, allowed) -> list[str]:
    """`file: module` for each import of a module of ours that `allowed(file, module)` refuses."""
    out = []
    for path in modules(package):
        where = path.relative_to(ROOT).as_posix()
        for module in sorted(imports(path)):
            top = module.split(".")[0]
            if top in ("profiler", "views", "reports") and top != package and not allowed(where, module):
                out.append(f"{where}: {module}")
    return out


def test_views_import_nothing_from_profiler_or_reports():
    assert broken("views", lambda where, module: False) == []


def test_reports_import_nothing_from_profiler():
    assert broken("reports", lambda where, module: module.startswith("views")) == []


def test_profiler_imports_no_reports_and_only_the_pure_parsers_of_views():
    def allowed(where: str, module: str) -> bool:
        return where == JOINT or module in PURE_VIEWS or module == "views"
    assert broken("profiler", allowed) == []


@pytest.mark.parametrize("module", sorted(PURE_VIEWS))
def test_the_pure_parsers_import_no_other_view(module):
    path = ROOT / (module.replace(".", "/") + ".py")
    assert {m for m in imports(path) if m.startswith("views")} <= PURE_VIEWS


def test_the_walk_sees_a_function_local_import(tmp_path):
    """A violation hidden inside a function is still found."""
    path = tmp_path / "sneaky.py"
    path.write_text("def f():\n    from reports.gate import Run\n    import views.registry\n")
    assert {"reports.gate", "views.registry"} <= imports(path)
