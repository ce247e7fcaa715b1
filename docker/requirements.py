"""Prints the runtime requirements of pyproject.toml, one a line, for the image's dependency layer.

    python docker/requirements.py [ONNXRUNTIME [EXTRA...]] > requirements.txt

The image installs these first (a layer that changes only when pyproject.toml or
constraints.txt does), then headwise itself with --no-deps. ONNXRUNTIME picks the
onnxruntime wheel for Linux x86_64:

- onnxruntime (the default, the CPU image): the CPU-only wheel, about 300 MB smaller, at the
  version constraints.txt pins for it (`onnxruntime==`), which must be onnxruntime-gpu's
  version there: the same kernels on CPU, the same answers (tests/e2e/test_docker.py);
- onnxruntime-gpu (the GPU image): what pyproject.toml asks for and constraints.txt pins.

EXTRA: optional dependency groups of pyproject.toml to add (the GPU image adds "gpu").
Standard library only: it runs in the build stage before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
CHOICES = ("onnxruntime", "onnxruntime-gpu")


def pins(root: Path) -> dict[str, str]:
    """constraints.txt's `name==version` lines, by name."""
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (root / "constraints.txt").read_text(), re.M))


def cpu_wheel_version(root: Path) -> str:
    """The onnxruntime pin of constraints.txt, checked against onnxruntime-gpu's."""
    pinned = pins(root)
    if "onnxruntime" not in pinned:
        raise SystemExit("constraints.txt pins no onnxruntime (the CPU image's wheel): add "
                         f"onnxruntime=={pinned.get('onnxruntime-gpu', '<onnxruntime-gpu version>')}")
    if pinned["onnxruntime"] != pinned.get("onnxruntime-gpu"):
        raise SystemExit(f"constraints.txt: onnxruntime=={pinned['onnxruntime']} but "
                         f"onnxruntime-gpu=={pinned.get('onnxruntime-gpu')}: the CPU wheel must be "
                         "the version the GPU wheel is tested at")
    return pinned["onnxruntime"]


def requirements(root: Path, onnxruntime: str = "onnxruntime", *extras: str) -> list[str]:
    if onnxruntime not in CHOICES:
        raise SystemExit(f"ONNXRUNTIME={onnxruntime!r}: choose one of {', '.join(CHOICES)}")
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"])
    for extra in extras:
        if extra not in project["optional-dependencies"]:
            raise SystemExit(f"no extra {extra!r} in pyproject.toml")
        deps += project["optional-dependencies"][extra]
    if onnxruntime == "onnxruntime-gpu":
        return deps
    version = cpu_wheel_version(root)
    out = []
    for dep in deps:
        name = re.match(r"[A-Za-z0-9_.-]+", dep).group(0)
        if name == "onnxruntime-gpu":
            out.append(f"onnxruntime=={version}; {dep.split(';', 1)[1].strip()}")
        else:
            out.append(dep)
    return out


if __name__ == "__main__":
    root = Path.cwd() if (Path.cwd() / "pyproject.toml").is_file() else HERE.parent
    print("\n".join(requirements(root, *sys.argv[1:])))
