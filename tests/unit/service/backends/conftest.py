from __future__ import annotations

import os

import pytest

from headwise.service.backends.core import EngineCore
from headwise.service.backends.remote import EngineLink
from headwise.service.package import load_package
from headwise.service.settings import Settings
from tests.fixtures.engine_core import Recording


@pytest.fixture
def engine(package, tmp_path):
    """→ start(delay=0.0) → (core, link, backend): an EngineCore on the fake backend and a
    front-end's link to it; both closed after the test. `on_run` is also told of each run."""
    made = []

    def start(delay: float = 0.0, pid: int | None = None, on_run=None, **limits):
        pkg = load_package(package)
        backend = Recording(pkg, Settings(models_dir=package.parent), delay)
        backend.variants["fail"] = "fast"
        runs, drops = [], []

        def ran(*a):
            runs.append(a)
            if on_run is not None:
                on_run(*a)

        core = EngineCore({pkg.name: backend}, f"ipc://{tmp_path}/engine-{len(made)}.sock",
                          max_batch_size=limits.get("max_batch_size", 64),
                          max_batch_tokens=limits.get("max_batch_tokens", 16384),
                          on_run=ran, on_drop=lambda _model, rows: drops.append(rows))
        core.start(pid or os.getpid())
        link = EngineLink(core.address, connect_timeout_s=5)
        made.append((core, link))
        core.runs, core.drops = runs, drops
        return core, link, backend

    yield start
    for core, link in made:
        link.close()
        core.stop(2)
