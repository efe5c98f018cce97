"""The installed package: its console script really runs the CLI, and it declares what it imports.

These run `<venv>/bin/coursectl` as a user would, not typer's CliRunner, so a
typer and click pair that parses nothing (typer 0.12 with click 8.2 and later
printed the version and exited 0 for every command) cannot pass.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import COURSE, ROOT, real_lessons
from orchestrator import __version__
from orchestrator.errors import INTERRUPTED

SCRIPT = Path(sys.executable).parent / "coursectl"
COMMANDS = ["doctor", "build", "run", "verify", "record", "sanitize", "report"]


def run_script(*args: str) -> subprocess.CompletedProcess:
    assert SCRIPT.is_file(), f"{SCRIPT} is missing: install the package (pip install -e '.[test]')"
    env = {**os.environ, "COLUMNS": "200", "COURSECTL_NO_NVML": "1"}
    return subprocess.run([str(SCRIPT), *args], cwd=COURSE, env=env, capture_output=True, text=True, timeout=120)


def test_an_unknown_lesson_exits_2_with_the_error():
    result = run_script("verify", "no-such-lesson", "--offline")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("coursectl: error: no lesson 'no-such-lesson' in lessons.yaml\n"
                             f"hint: lessons: {', '.join(real_lessons())}\n")


def test_help_lists_the_commands():
    result = run_script("--help")
    assert (result.returncode, result.stderr) == (0, "")
    out = result.stdout.splitlines()
    listed = [line.split()[0] for line in out[out.index("Commands:") + 1:] if line.strip()]
    assert [c for c in listed if c in COMMANDS] == COMMANDS


def test_a_commands_help_shows_its_options():
    result = run_script("verify", "--help")
    assert (result.returncode, result.stderr) == (0, "")
    assert "--offline" in result.stdout and "--junit" in result.stdout


def test_version():
    result = run_script("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"coursectl {__version__}\n", "")


# Ctrl-C or SIGTERM in a command's first 0.3 s: a sitecustomize that sends the signal to its own process
# as typer starts to be imported, the first of the command line's modules.
SIGNAL_AT_IMPORT = """
import importlib.abc, os, sys


class SignalAtImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), {signal})
        return None


sys.meta_path.insert(0, SignalAtImport())
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("how", ["script", "python -m"])
def test_a_signal_while_the_command_line_is_imported_is_one_line_and_exit_130(tmp_path, signum, how):
    (tmp_path / "sitecustomize.py").write_text(SIGNAL_AT_IMPORT.format(signal=int(signum)))
    command = [str(SCRIPT)] if how == "script" else [sys.executable, "-m", "orchestrator"]
    env = {**os.environ, "COLUMNS": "200", "COURSECTL_NO_NVML": "1", "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([*command, "render", "--check"], cwd=COURSE, env=env, capture_output=True, text=True,
                            timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (130, "", f"{INTERRUPTED}\n")


# Modules whose distribution is named otherwise, for when it is not installed here.
DISTRIBUTION_OF = {"yaml": "pyyaml", "pynvml": "nvidia-ml-py"}


def imported_modules() -> set[str]:
    """Top-level names every module of the package imports, less the standard library and itself."""
    names = set()
    for path in (ROOT / "orchestrator").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "orchestrator"}


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_imported_package_is_declared():
    requires = importlib.metadata.requires("coursectl") or []
    declared = {requirement_name(r) for r in requires if "extra ==" not in r}
    optional = {requirement_name(r) for r in requires if "extra ==" in r}
    installed = importlib.metadata.packages_distributions()
    needed = {}
    for module in imported_modules():
        dists = installed.get(module) or [DISTRIBUTION_OF.get(module, module)]
        needed[module] = {d.lower().replace("_", "-") for d in dists}
    missing = {m: d for m, d in needed.items() if not d & (declared | optional)}
    assert missing == {}
    assert {"typer", "rich", "pydantic", "jinja2", "pyyaml", "simpleeval"} <= declared


def test_click_is_no_dependency_of_the_package_as_nothing_of_it_imports_click():
    """typer 0.26 and later carry their own click; older ones declare the click they need."""
    requires = importlib.metadata.requires("coursectl") or []
    assert "click" not in imported_modules()
    assert "click" not in {requirement_name(r) for r in requires if "extra ==" not in r}


# -- the distributions: built once, as `python -m build` does (the sdist, then the wheel from it) ----
@pytest.fixture(scope="module")
def distributions(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    pytest.importorskip("build", reason="the build package is missing (pip install -e '.[test]')")
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return {"sdist": next(out.glob("*.tar.gz")), "wheel": next(out.glob("*.whl"))}


def sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as tar:
        return {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}


@pytest.mark.slow
def test_the_license_is_in_the_sdist_and_the_wheel(distributions):
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n\nCopyright (c) 2026 the coursectl authors\n")
    assert "LICENSE" in sdist_names(distributions["sdist"])
    with zipfile.ZipFile(distributions["wheel"]) as wheel:
        licenses = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1 and wheel.read(licenses[0]).decode() == license_text
        metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT\n" in metadata and "License-File: LICENSE\n" in metadata
    assert "Classifier: Programming Language :: Python :: 3.13\n" in metadata


@pytest.mark.slow
def test_the_sdist_holds_what_its_tests_read(distributions):
    """Its tests ran into 31 collection errors when it shipped the test files alone."""
    names = sdist_names(distributions["sdist"])
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout:
        wanted = {n for n in tracked.stdout.splitlines() if n.split("/")[0] in {
            "tests", "lessons", "evidence", "templates", "bench", "docs", "tools", ".github", ".ci"}}
        assert wanted - names == set()
    for name in ("tests/conftest.py", "lessons.yaml", "Makefile", "pyproject.toml", ".ci/run"):
        assert name in names
    assert any(n.startswith("tests/data/") for n in names) and any(n.startswith("tests/fixtures/") for n in names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
