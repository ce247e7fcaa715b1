"""The engine holds encoder and generative models behind one Runtime protocol: each declares
the capabilities it has, an operation it lacks is refused with the one domain error (naming
what it serves and which routes serve what was asked), and each takes its sessions from the
engine's backend factory (so tests can hand either a fake)."""

import asyncio

import pytest

from headwise.service.engine.generation.runtime import GenerativeRuntime
from headwise.service.engine.params import AttentionSpec
from headwise.service.engine.runtime import Capability, require
from headwise.service.errors import Validation
from headwise.service.metrics import Metrics
from headwise.service.settings import Settings
from tests.unit.fakes import FakeBackend, make_package


def test_attention_spec_checks_indices_and_fills_all():
    spec = AttentionSpec.select(2, 3, None, [2], dtype="float16")
    assert spec.layers == (0, 1) and spec.all_layers and spec.heads == (2,) and not spec.all_heads
    assert spec.nbytes(4) == 2 * 1 * 16 * 2 and spec.values_bytes(5) == 2 * 1 * 5 * 2
    for bad in ([], [3], [-1]):
        with pytest.raises(Validation, match=r"attention\.heads"):
            AttentionSpec.select(2, 3, None, bad)


def test_an_encoder_refuses_generation_and_the_reverse(tmp_path):
    from headwise.service.engine import Engine
    from headwise.service.engine.generation.sequence import GenerateInput

    make_package(tmp_path / "models")
    engine = Engine(Settings(models_dir=tmp_path / "models"), Metrics(), FakeBackend)
    engine.load_packages()
    engine.ready = True
    rt = engine.get("tiny", needs=Capability.EMBED)
    assert rt.capabilities == {Capability.EMBED} and not hasattr(rt, "generate")
    with pytest.raises(Validation, match=r"'tiny' is an embedding model: use POST /v1/embed; /v1/generate serves"):
        asyncio.run(engine.generate(rt, GenerateInput(prompt="x")))
    with pytest.raises(Validation, match="embedding model"):
        engine.get("tiny", needs=Capability.GENERATE)


def test_a_generative_model_takes_its_sessions_from_the_factory(monkeypatch):
    made = []

    class Stub:
        provider, precision = "cpu", "fp32"

    def factory(package, settings):
        made.append(package)
        return Stub()

    rt = object.__new__(GenerativeRuntime)  # no package on disk: only load's wiring is under test
    rt.package = type("P", (), {"version": "1", "name": "g", "architecture": "decoder"})()
    rt.settings, rt.metrics = None, Metrics()
    rt.load(factory)
    assert made == [rt.package] and isinstance(rt.backend, Stub)
    with pytest.raises(Validation, match="'g' is a decoder model: it generates text with POST /v1/generate; "
                                         "/v1/embed, /v1/similarity and /v1/occlusion serve embedding models"):
        require(rt, Capability.EMBED)


def test_the_fake_backend_is_what_the_engine_uses(tmp_path):
    from headwise.service.engine import Engine

    make_package(tmp_path / "models")
    engine = Engine(Settings(models_dir=tmp_path / "models"), Metrics(), FakeBackend)
    engine.load_packages()
    engine._prepare()
    assert isinstance(engine.models["tiny"].backend, FakeBackend)
