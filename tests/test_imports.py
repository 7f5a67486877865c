"""Data flows one way: profiler -> views -> reports, and the command line (profiler/cli.py over
the application layer, the commands package) is the one joint: commands may import all three,
and no module of profiler, views or reports imports it but profiler/cli.py.

Every import of every module is read (function-local ones too): views imports nothing from
profiler or reports; reports nothing from profiler; profiler nothing from reports, and of views
only the pure parsers (the vocabulary and the kernel-name parser), which import no other view.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
CLI = "profiler/cli.py"  # the command line: of profiler, the one module that imports commands and reports
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
            if node.module in ("profiler", "views", "reports", "commands"):
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
            if top in ("profiler", "views", "reports", "commands") and top != package and not allowed(where, module):
                out.append(f"{where}: {module}")
    return out


def test_views_import_nothing_from_profiler_or_reports():
    assert broken("views", lambda where, module: False) == []


def test_reports_import_nothing_from_profiler():
    assert broken("reports", lambda where, module: module.startswith("views")) == []


def test_profiler_imports_no_reports_and_only_the_pure_parsers_of_views():
    def allowed(where: str, module: str) -> bool:
        return where == CLI or (module in PURE_VIEWS or module == "views")
    assert broken("profiler", allowed) == []


def test_the_commands_join_the_three_and_are_imported_by_the_cli_alone():
    assert broken("commands", lambda where, module: True) == []
    joined = {module.split(".")[0] for path in modules("commands") for module in imports(path)}
    assert {"profiler", "views", "reports"} <= joined


@pytest.mark.parametrize("module", sorted(PURE_VIEWS))
def test_the_pure_parsers_import_no_other_view(module):
    path = ROOT / (module.replace(".", "/") + ".py")
    assert {m for m in imports(path) if m.startswith("views")} <= PURE_VIEWS


def test_the_walk_sees_a_function_local_import(tmp_path):
    """A violation hidden inside a function is still found."""
    path = tmp_path / "sneaky.py"
    path.write_text("def f():\n    from reports.gate import Run\n    import views.registry\n")
    assert {"reports.gate", "views.registry"} <= imports(path)


# --- no import circles, no private names across modules ----------------------------------------
# The graph of the package's modules: an edge for every import anywhere in a module (inside a
# function too), resolved to the module of ours it runs: `from profiler.ingest import store` is
# profiler.ingest.store, `from profiler.ingest.store import Store` is profiler.ingest.store. An
# import under `if TYPE_CHECKING:` never runs and names only a type, so it is no edge.
PACKAGES = ("profiler", "views", "reports", "commands")

# Cycles left on purpose, each as the sorted modules of its strongly connected component, and why.
KNOWN_CYCLES: dict[tuple[str, ...], str] = {}

# `module: imported name` of private names read across modules, left on purpose, and why.
KNOWN_PRIVATE: dict[str, str] = {}


def package_modules() -> dict[str, Path]:
    """Each module of ours by its dotted name (a package by its own: profiler.ingest)."""
    out = {}
    for package in PACKAGES:
        for path in modules(package):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _type_only(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under `if TYPE_CHECKING:`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


class Module:
    """What one module of ours imports of the others: the modules, and the private names read."""

    def __init__(self, name: str, path: Path, known: dict[str, Path]):
        self.name, self.edges, self.private = name, set(), set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = _type_only(tree)
        aliases = {}  # a local name bound to a module of ours -> that module

        def ours(dotted: str) -> str | None:
            while dotted and dotted not in known:
                dotted = dotted.rpartition(".")[0]
            return dotted or None

        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (target := ours(alias.name)) is not None:
                        self.edges.add(target)
                        if alias.asname and alias.name in known:
                            aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}: relative import"
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in known:
                        self.edges.add(full)
                        aliases[alias.asname or alias.name] = full
                    elif (target := ours(node.module)) is not None:
                        self.edges.add(target)
                        if _private(alias.name) and target != name:
                            self.private.add(f"{target}.{alias.name}")
        for node in ast.walk(tree):  # `module._name` of a module of ours bound above
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _private(node.attr) and aliases[node.value.id] != name):
                self.private.add(f"{aliases[node.value.id]}.{node.attr}")
        self.edges.discard(name)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def graph() -> dict[str, Module]:
    known = package_modules()
    return {name: Module(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(tuple(sorted(component)))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def describe(component: tuple[str, ...], edges: dict[str, set[str]]) -> str:
    """`a -> b, c; b -> a`: who imports whom inside the circle."""
    inside = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(edges[m] & inside))}" for m in component)


def test_no_import_circles():
    edges = {name: module.edges for name, module in graph().items()}
    found = cycles(edges)
    new = [describe(c, edges) for c in found if c not in KNOWN_CYCLES]
    assert new == [], "import circles (break each: move the shared piece down, or invert):\n" + "\n".join(new)
    assert sorted(KNOWN_CYCLES) == [c for c in found if c in KNOWN_CYCLES], "a known circle is gone: drop it"


def test_no_private_names_across_modules():
    found = sorted(f"{name}: {private}" for name, module in graph().items() for private in module.private)
    assert [f for f in found if f not in KNOWN_PRIVATE] == []
    assert sorted(KNOWN_PRIVATE) == [f for f in found if f in KNOWN_PRIVATE], "a known one is gone: drop it"


def test_the_graph_sees_a_circle_through_a_function_local_import(tmp_path):
    """A circle one side of which imports inside a function is still a circle, and is named."""
    (tmp_path / "a.py").write_text("from b import thing\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import _helper\n")
    known = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    mods = {name: Module(name, path, known) for name, path in known.items()}
    edges = {name: m.edges for name, m in mods.items()}
    assert cycles(edges) == [("a", "b")] and describe(("a", "b"), edges) == "a -> b; b -> a"
    assert mods["b"].private == {"a._helper"}


def test_a_type_only_import_is_no_edge(tmp_path):
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from b import B\nimport b as bee\nbee._x\n")
    (tmp_path / "b.py").write_text("")
    known = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    module = Module("a", known["a"], known)
    assert module.edges == {"b"} and module.private == {"b._x"}
