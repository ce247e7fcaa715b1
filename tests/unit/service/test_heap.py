"""A server process freezes what start-up built once it is ready (service.heap): start-up's
cyclic garbage is collected first, what is left stays out of later collections and is still
freed by its count, later cycles are collected at the serving thresholds; an app a test builds
is left alone unless it asks."""

from __future__ import annotations

import gc
import weakref

import pytest

from headwise.service import heap
from tests.unit.fakes import FakeBackend, make_package, wait_ready


@pytest.fixture
def thawed():
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the suite collects as before
    gc.set_threshold(*thresholds)


class Node:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it


def test_settle_collects_then_freezes(thawed):
    garbage = Node()
    gone = weakref.ref(garbage)
    del garbage
    kept = Node()
    frozen = heap.settle()
    assert gone() is None  # start-up's garbage went first
    # the suite's other threads may free frozen objects meanwhile: the count only falls
    assert 0 < gc.get_freeze_count() <= frozen
    assert not any(o is kept for o in gc.get_objects())  # in no generation a collection walks
    assert gc.get_threshold() == heap.THRESHOLDS


def test_cycles_made_after_settling_are_still_collected(thawed):
    heap.settle()
    gone = weakref.ref(Node())  # a cycle dropped at once
    assert gone() is not None  # only the collector frees it
    kept = [[] for _ in range(heap.THRESHOLDS[0] + 1)]  # tracked objects enough for a young collection
    assert gone() is None
    del kept


def test_frozen_objects_are_still_freed_by_count(thawed):
    class Plain:
        pass

    obj = Plain()
    gone = weakref.ref(obj)
    heap.settle()
    del obj
    assert gone() is None


@pytest.mark.parametrize("settle", [False, True])
def test_the_app_settles_its_heap_once_ready_only_when_asked(tmp_path, thawed, settle):
    from fastapi.testclient import TestClient

    from headwise.service.api.app import create_app
    from headwise.service.settings import Settings

    package = make_package(tmp_path)
    app = create_app(Settings(models_dir=package.parent), backend_factory=FakeBackend, settle_heap=settle)
    with TestClient(app) as client:
        wait_ready(client)
        assert (gc.get_freeze_count() > 0) is settle
        assert client.post("/v1/embed", json={"inputs": "the cat sat"}).status_code == 200


def test_whole_server_workers_settle_their_heap_too(tmp_path, monkeypatch):
    """`headwise serve` with HEADWISE_WORKERS > 1: uvicorn builds each worker's app from a
    factory string, with and without the fast path; each worker is a server process."""
    import importlib

    from headwise.service.server import fastpath, serve

    monkeypatch.setenv("HEADWISE_MODELS_DIR", str(make_package(tmp_path).parent))
    for factory in (serve.PLAIN_FACTORY, fastpath.FACTORY):
        module, name = factory.split(":")
        made = getattr(importlib.import_module(module), name)()
        app = getattr(made, "app", made)  # fastpath.Entry wraps the app
        assert app.state.settle_heap, factory
