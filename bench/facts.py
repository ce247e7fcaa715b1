"""Facts about the machine and the code a run measured: cores, CPU, versions, git commit."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def usable_cores() -> int:
    try:
        from headwise.service.cpu import usable_cores as cores

        return cores()
    except ImportError:  # pragma: no cover - bench run outside the repo
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1


def _version(mod: str) -> str:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:
        return "not installed"


def machine_facts(provider: str) -> dict:
    from headwise.export import cpu as cpu_info  # stdlib only: no torch, no onnx

    cpu = cpu_info.label()
    # HEADWISE_BENCH_COMMIT: when run from an export of a commit (git archive), not a checkout
    commit = tree_commit(os.environ.get("HEADWISE_BENCH_COMMIT"))
    import onnxruntime as ort

    build = "onnxruntime-gpu" if _version("onnxruntime-gpu") != "not installed" else "onnxruntime"
    return {
        "cores usable (affinity, cgroup)": usable_cores(),
        "cores on host": os.cpu_count(),
        "cpu": cpu,  # the model and its avx2 / avx512 / vnni / amx flags: ratios hold only for it
        "provider": provider,
        "onnxruntime": f"{ort.__version__} ({build}); available: {', '.join(ort.get_available_providers())}",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "sentence-transformers": _version("sentence-transformers"),
        "wrk": _wrk_version(),
        "git commit": commit,
    }


ROOT = Path(__file__).resolve().parent.parent  # git's pathspecs above name the repository's folders


def _git(*args: str, cwd: Path = ROOT) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                              cwd=cwd).stdout.rstrip()  # porcelain lines start with a space
    except (OSError, subprocess.SubprocessError):
        return ""


def tree_commit(commit: str | None = None, root: Path = ROOT) -> str:
    """The checkout's short commit (or `commit`, for an export that is no checkout), plus the
    files of the measured code with uncommitted changes."""
    commit = commit or _git("rev-parse", "--short", "HEAD", cwd=root) or "?"
    dirty = _git("status", "--porcelain", "--", "headwise", "bench", cwd=root)
    if dirty:
        files = sorted(line[3:] for line in dirty.splitlines())
        commit += f" + uncommitted changes in {', '.join(files)}"
    return commit


def _wrk_version() -> str:
    try:
        out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=5)
        return (out.stdout or out.stderr).splitlines()[0].split(" Copyright")[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "not found (python load generator)"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"
