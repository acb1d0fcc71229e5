"""The parts keep to docs/architecture.md: no module reaches into another's private names.

(The arrows between the parts are import-linter contracts in pyproject.toml, run by
``make lint`` and ``make test``.)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("toolhub", "profiles_app", "sessions_app", "agent_app")


def _modules() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def _private_imports(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [
                f"{where}:{node.lineno} imports {node.module}.{alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    modules = _modules()
    assert len(modules) > 50, "the scan found the packages"
    offences = [
        offence
        for path in modules
        for offence in _private_imports(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert offences == []


def test_the_scan_catches_a_private_import_and_lets_a_dunder_pass() -> None:
    source = "from a.b import public, _hidden\nfrom c import __version__\n"
    assert _private_imports(source, "sample.py") == ["sample.py:1 imports a.b._hidden"]
