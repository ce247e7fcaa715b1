"""The repository stands alone: nothing in it points outside it (issue 16)."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Spelled in two parts so that this file does not find itself.
FORBIDDEN = ("../" + "shared", "DESIGN" + ".md")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True).stdout
        return [REPO / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # a copy without .git
        skip = {".git", ".venv", "models", "__pycache__", ".pytest_cache", ".ruff_cache"}
        return [p for p in REPO.rglob("*") if p.is_file() and not skip & set(p.relative_to(REPO).parts)]


def test_no_file_points_outside_the_repository():
    hits = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (images)
        for n, line in enumerate(text.splitlines(), 1):
            hits += [f"{path.relative_to(REPO)}:{n}: {word}" for word in FORBIDDEN if word in line]
    assert not hits, "\n".join(hits)


def test_the_stsb_dev_split_ships_with_its_licence():
    from headwise.export.stsb import BUNDLED, find_stsb, load_pairs

    assert find_stsb() == BUNDLED
    licence = (BUNDLED.parent / "LICENSE.txt").read_text()
    assert "creativecommons.org/licenses/by-sa/4.0" in licence and "SemEval" in licence
    a, b, gold = load_pairs(BUNDLED)
    assert len(a) == len(b) == len(gold) == 1500
