"""headwise.export and headwise.model import each other's modules in one direction only: no
module reaches itself again through its imports (lazy imports inside functions count)."""

import grimp
import pytest


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("headwise")


@pytest.mark.parametrize("package", ["headwise.export", "headwise.model"])
def test_no_import_cycle(graph, package):
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    cycles = [(a, b) for a in sorted(modules) for b in sorted(graph.find_modules_directly_imported_by(a) & modules)
              if graph.chain_exists(importer=b, imported=a)]
    assert cycles == []
