"""The package's layout: folders by stage, each importing only the folders below it, no cycle, no module
over 500 lines, empty __init__.py files (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "orchestrator"

# The stages, lowest first: a module may import its own folder and the folders before it. The modules
# directly in orchestrator/ are the ground floor.
STAGES = ("", "transcript", "manifest", "cuda", "judge", "render", "workflows", "cli")
# The console script's entry point is the one module of the ground floor that starts the command line.
ENTRY = {"orchestrator.__main__": {"orchestrator.cli.main"}}
MAX_LINES = 500


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of the package that `name` imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        for target in targets:
            if target in known and target != name:
                found.add(target)
    return found


def stage_of(name: str) -> int:
    parts = name.split(".")
    folder = parts[1] if len(parts) > 2 else ""
    return STAGES.index(folder)


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def test_every_folder_is_a_stage():
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert folders == set(STAGES) - {""}


def test_no_module_imports_a_folder_above_its_own():
    above = []
    for name, targets in graph().items():
        for target in sorted(targets):
            if target in ENTRY.get(name, ()) or target == "orchestrator":
                continue
            if stage_of(target) > stage_of(name):
                above.append(f"{name} imports {target}")
    assert above == []


def test_no_import_cycle():
    edges = graph()
    cycles = []
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(edges[name]):
            if target == "orchestrator":
                continue
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def private_imports(path: Path) -> list[str]:
    """The names beginning with `_` (not dunders) that a module imports from a module of the package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("orchestrator")):
            found += [f"{'.' * node.level}{node.module or ''} import {alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another():
    """What one module needs of another has a public name: a private one may change without a caller knowing."""
    private = [f"{name}: from {target}" for name, path in modules().items() for target in private_imports(path)]
    assert private == []


def test_the_layout_test_sees_a_private_import(tmp_path):
    (tmp_path / "m.py").write_text("from .claims import BlockView, _names\nfrom urllib.parse import quote as _q\n"
                                   "from . import __version__\n")
    assert private_imports(tmp_path / "m.py") == [".claims import _names"]


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_is_over_500_lines(name):
    lines = modules()[name].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{name}: {lines} lines"


def test_folders_re_export_nothing():
    for path in PACKAGE.rglob("__init__.py"):
        if path.parent != PACKAGE:
            assert path.read_text(encoding="utf-8") == "", path


def test_the_layout_test_sees_an_import_from_above(tmp_path, monkeypatch):
    """The check itself: a ground-floor module importing a stage is found, relative or absolute."""
    (tmp_path / "orchestrator" / "judge").mkdir(parents=True)
    (tmp_path / "orchestrator" / "__init__.py").write_text("")
    (tmp_path / "orchestrator" / "judge" / "__init__.py").write_text("")
    (tmp_path / "orchestrator" / "judge" / "results.py").write_text("")
    (tmp_path / "orchestrator" / "files.py").write_text("def f():\n    from .judge.results import x\n")
    (tmp_path / "orchestrator" / "words.py").write_text("import orchestrator.judge.results\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "orchestrator")
    edges = graph()
    assert edges["orchestrator.files"] == {"orchestrator.judge.results"}
    assert edges["orchestrator.words"] == {"orchestrator.judge.results"}
    assert stage_of("orchestrator.judge.results") > stage_of("orchestrator.files")
