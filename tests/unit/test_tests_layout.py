"""The test suite's own layout: no module under tests/ imports a test module (tests/**/test_*.py).

Helpers shared between test modules live in tests/fixtures/ and fixtures in a conftest.py. A
fixture imported into a second test module is registered there a second time, so a session-scoped
one (an image build, say) runs once per importing module instead of once per session.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    return ".".join(("tests", *path.relative_to(TESTS).with_suffix("").parts))


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and len(parts) > 1 and parts[-1].startswith("test_")


def imported_test_modules(source: str, module: str, is_package: bool = False) -> list[str]:
    """The test modules that `source` (the text of `module`) imports, by their dotted names."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from .test_x import y`, `from . import test_x`
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if _is_test_module(base):
                found.append(base)
            else:  # `from tests.e2e import test_docker`
                found += [f"{base}.{a.name}" for a in node.names if _is_test_module(f"{base}.{a.name}")]
    return found


def test_no_module_under_tests_imports_a_test_module():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for name in imported_test_modules(source, _module_name(path), path.name == "__init__.py"):
            offenders.append(f"{path.relative_to(TESTS.parent)} imports {name}")
    assert not offenders, ("move what they share into tests/fixtures/ (helpers) or a conftest.py "
                           "(fixtures):\n" + "\n".join(offenders))


@pytest.mark.parametrize(("source", "found"), [
    ("from tests.e2e.test_docker import docker", ["tests.e2e.test_docker"]),
    ("import tests.e2e.test_service_traffic as t", ["tests.e2e.test_service_traffic"]),
    ("from tests.e2e import test_docker, conftest", ["tests.e2e.test_docker"]),
    ("from .test_reliability_input import proc_status", ["tests.e2e.test_reliability_input"]),
    ("from . import test_docker", ["tests.e2e.test_docker"]),
    ("from ..unit.test_x import y", ["tests.unit.test_x"]),
    ("def f():\n    from tests.e2e.test_docker import docker", ["tests.e2e.test_docker"]),
    ("from tests.e2e.conftest import REPO\nfrom tests.fixtures.docker import docker\n"
     "from tests.unit.fakes import make_package\nimport test_utils", []),
])
def test_the_check_finds_every_form_of_import(source, found):
    assert imported_test_modules(source, "tests.e2e.test_new") == found
