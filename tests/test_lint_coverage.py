"""The linter sees every module of the package.

ruff (like other tools) silently skips folders it takes for build output
(``dist``, ``build``, ``venv`` ...).  A package folder with such a name would
never be linted; this test fails when any ``.py`` file under ``src/`` is not in
the list of files ruff checks, and when ``make test`` stops running the linter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    exe = Path(sys.executable).parent / "ruff"
    if exe.exists():
        return str(exe)
    found = shutil.which("ruff")
    if not found:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return found


def test_ruff_checks_every_module_under_src() -> None:
    out = subprocess.run([_ruff(), "check", "--show-files", "src"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    checked = {Path(line.strip()).resolve() for line in out.splitlines() if line.strip().endswith(".py")}
    modules = {p.resolve() for p in (ROOT / "src").rglob("*.py")}
    missed = sorted(str(p.relative_to(ROOT)) for p in modules - checked)
    assert modules, "no modules found under src/"
    assert not missed, f"ruff skips these modules: {missed}"


def test_make_test_runs_the_linter_before_the_tests() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in recipe.splitlines() if line.strip()]
    lint = [i for i, line in enumerate(lines) if "ruff check" in line and "src" in line]
    tests = [i for i, line in enumerate(lines) if "pytest" in line]
    assert lint and tests and lint[0] < tests[0], lines
