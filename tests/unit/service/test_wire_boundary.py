"""The engine does not know the wire format (issue 39, item 1): it counts what an answer holds
(service.engine.size.Size) and asks the Measure it was given; what a count takes in bytes, and
the refusal of an answer over HEADWISE_MAX_RESPONSE_BYTES, live in service.api.sizes."""

import ast
from pathlib import Path

import pytest

from headwise.service.api.sizes import JSON, block_bytes, written_bytes
from headwise.service.engine.size import Block, Size, total
from headwise.service.errors import TooLarge

SERVICE = Path(__file__).resolve().parents[3] / "headwise" / "service"
WIRE_NAMES = {"check_response_bytes", "JSON_VALUE_BYTES", "JSON_INDEX_BYTES", "TOKEN_BYTES", "LABEL_BYTES",
              "written_bytes", "block_bytes", "JSON"}


def _names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    found |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    found |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return found


def test_no_json_byte_constant_or_response_check_outside_api():
    outside = [p for p in SERVICE.rglob("*.py") if "api" not in p.relative_to(SERVICE).parts[:1]
               and "server" not in p.relative_to(SERVICE).parts[:1]]
    assert len(outside) > 40
    leaks = {str(p.relative_to(SERVICE)): sorted(_names(p) & WIRE_NAMES) for p in outside}
    assert {k: v for k, v in leaks.items() if v} == {}


def test_json_prices_each_count():
    size = Size(values=2, indices=3, tokens=1, chars=5, labels=1, records=2)
    assert JSON.bytes(size) == 2 * 16 + 3 * 6 + 48 + 5 * 6 + 32 + 2 * 64
    dense, top = Block(10, "float16", "base64"), Block(4, "float32", "json", indices=4)
    assert block_bytes(dense) == written_bytes(10, "float16", "base64") == -(-20 * 4 // 3)
    assert block_bytes(top) == 4 * 16 + 4 * 6
    assert block_bytes(Block(6, rows=2)) == 6 * 16 + 32 + 2 * 3  # {shape, data} and its rows' brackets
    assert JSON.bytes(total([size, Size(blocks=(dense, top))])) == JSON.bytes(size) + block_bytes(dense) + block_bytes(top)


def test_json_check_refuses_over_the_cap_naming_the_setting():
    size = Size(values=10)
    assert JSON.check(size, 160, "ask for less") == 160
    with pytest.raises(TooLarge, match=r"takes up to 176 bytes, over HEADWISE_MAX_RESPONSE_BYTES \(160\); ask for less"):
        JSON.check(size + Size(values=1), 160, "ask for less")
