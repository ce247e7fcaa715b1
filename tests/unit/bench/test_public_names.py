"""bench/ uses headwise's public names only (issue 39, item 6): CI broke twice when the service
renamed a private name that bench reached for (`explain._split`, `Engine._check`).

Outside bench/experiments/, no module imports a leading-underscore name or module from
headwise, and none reaches a leading-underscore attribute of anything but itself (`self._x`,
`cls._x`), whether as `obj._x` or by name (`getattr(obj, "_x")`, `need(obj, "_x")`,
`mock.patch.object(obj, "_x")`). Dunder names are public. import-linter checks modules, not
names, so this test is the contract.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
BY_NAME = {"getattr", "hasattr", "setattr", "delattr", "need", "object"}  # f(obj, "name", ...)

# What bench still reaches for, each until headwise offers a public name for it.
ALLOWED: dict[tuple[str, str], str] = {}  # every private name bench used has a public one now


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of every private name `source` takes from headwise or from another object."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.split(".")[0] == "headwise" and any(map(_private, a.name.split(".")))]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "headwise":
            parts = node.module.split(".")
            found += [(node.lineno, p) for p in parts if _private(p)]
            found += [(node.lineno, a.name) for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            name = node.args[1]
            if func in BY_NAME and isinstance(name, ast.Constant) and isinstance(name.value, str) \
                    and _private(name.value):
                found.append((node.lineno, name.value))
    return found


def bench_modules() -> list[Path]:
    return sorted(p for p in BENCH.rglob("*.py") if "experiments" not in p.relative_to(BENCH).parts)


def test_bench_takes_no_private_name_but_the_allowed_ones():
    used, offenders = set(), []
    for path in bench_modules():
        rel = path.relative_to(BENCH).as_posix()
        for line, name in private_names(path.read_text(encoding="utf-8")):
            if (rel, name) in ALLOWED:
                used.add((rel, name))
            else:
                offenders.append(f"bench/{rel}:{line}: {name}")
    assert not offenders, ("bench uses headwise's public names only: use a public one, or ask for one in "
                           "headwise (then list it in ALLOWED, with why):\n" + "\n".join(offenders))
    assert used == set(ALLOWED), f"no longer used: take them out of ALLOWED: {sorted(set(ALLOWED) - used)}"


@pytest.mark.parametrize(("source", "found"), [
    ("from headwise.service.engine.analytics.explain import _split", ["_split"]),
    ("from headwise.service._impl import thing", ["_impl"]),
    ("import headwise._private.x", ["headwise._private.x"]),
    ("engine._check(texts)", ["_check"]),
    ("x = backend._sessions['embed']", ["_sessions"]),
    ("getattr(backend, '_sessions', None)", ["_sessions"]),
    ("need(rt, '_entries')", ["_entries"]),
    ("mock.patch.object(router, '_dumps', f)", ["_dumps"]),
    ("def f(self):\n    return self._x + cls._y", []),
    ("from headwise.service.api import app\napp.__name__, obj.__dict__", []),
    ("from bench.stats import median\nimport headwise.cli", []),
    ("getattr(obj, 'public')\nneed(obj, 'batchers')", []),
])
def test_the_check_finds_every_form(source, found):
    assert [name for _, name in private_names(source)] == found
