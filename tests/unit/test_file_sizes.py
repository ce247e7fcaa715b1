"""No Python source file over 400 lines (issue 39's target): a file that grows past it is split
by concern, not trimmed of its docstrings."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 400


def test_no_python_file_is_over_400_lines():
    files = [p for top in ("headwise", "bench", "tests") for p in (REPO / top).rglob("*.py")]
    assert len(files) > 300
    long = {str(p.relative_to(REPO)): n for p in files if (n := len(p.read_text().splitlines())) > LIMIT}
    assert long == {}
