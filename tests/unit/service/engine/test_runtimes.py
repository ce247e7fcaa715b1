
"""The engine holds encoder and generative models behind one Runtime protocol: each declares
the capabilities it has, an operation it lacks is refused with the one domain error (naming
what it serves and which routes serve what was asked), and each takes its sessions from the
engine's backend factory (so tests can hand either a fake)."""

import asyncio

import pytest

from headwise.service.api.sizes import JSON
from headwise.service.engine.generation.runtime import GenerativeRuntime
from headwise.service.engine.params import AttentionSpec
from headwise.service.engine.runtime import (
    Analyser,
    Capability,
    Classifier,
    Embedder,
    Generator,
    Tagger,
)
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
    engine = Engine(Settings(models_dir=tmp_path / "models"), Metrics(), FakeBackend, measure=JSON)
    engine.load_packages()
    engine.ready = True
    rt = engine.get("tiny", needs=Capability.EMBED)
    assert rt.capabilities == {Capability.EMBED, Capability.ANALYSE} and not hasattr(rt, "generate")
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
        Capability.EMBED.of(rt)


def test_the_fake_backend_is_what_the_engine_uses(tmp_path):
    from headwise.service.engine import Engine

    make_package(tmp_path / "models")
    engine = Engine(Settings(models_dir=tmp_path / "models"), Metrics(), FakeBackend, measure=JSON)
    engine.load_packages()
    engine._prepare()
    assert isinstance(engine.models["tiny"].backend, FakeBackend)


def _members(protocol: type) -> set[str]:
    """What a protocol declares, its bases' included (Protocol's own machinery left out)."""
    out = set()
    for cls in protocol.__mro__:
        if cls.__module__ == "headwise.service.engine.runtime":
            out |= {n for n in (*vars(cls), *getattr(cls, "__annotations__", {})) if not n.startswith("_")}
    return out


def test_each_kind_has_what_its_capabilities_protocols_declare(tmp_path):
    """A capability narrows a model to its protocol: every model that declares one must carry
    each member of it (what the engine and the routers then call without a downcast)."""
    import hashlib
    import json

    from headwise.service.engine.encoder import EncoderRuntime
    from headwise.service.engine.heads import LogitsHead, TokenHead
    from headwise.service.package import load_package

    settings, metrics = Settings(models_dir=tmp_path / "models"), Metrics()
    pkg = load_package(make_package(tmp_path / "models"))
    cross = EncoderRuntime(pkg, settings, metrics, JSON, head=LogitsHead(type("P", (), {"labels": ("score",)})(), None))
    gen = make_package(tmp_path / "gen", "gen")
    m = json.loads((gen / "manifest.json").read_text())
    (gen / "step.onnx").write_bytes(b"step")
    step = {"file": "step.onnx", "sha256": hashlib.sha256(b"step").hexdigest(), "outputs": ["logits"]}
    m.update(architecture="decoder", pooling=None, special_tokens={"eos": 3}, variants={"prefill": step,
                                                                                       "decode": step})
    (gen / "manifest.json").write_text(json.dumps(m))
    runtimes = [EncoderRuntime(pkg, settings, metrics, JSON), cross,
                GenerativeRuntime(load_package(gen), Settings(models_dir=gen.parent), metrics, JSON)]
    protocols = {Capability.EMBED: Embedder, Capability.CLASSIFY: Classifier, Capability.RERANK: Classifier,
                 Capability.TAG: Tagger, Capability.ANALYSE: Analyser, Capability.GENERATE: Generator}
    runtimes.append(EncoderRuntime(pkg, settings, metrics, JSON, head=TokenHead(type("P", (), {"labels": ("O", "B")})(), type("T", (), {"special_ids": frozenset()})())))
    assert [rt.capabilities for rt in runtimes] == [
        {Capability.EMBED, Capability.ANALYSE}, {Capability.CLASSIFY, Capability.RERANK, Capability.ANALYSE},
        {Capability.GENERATE}, {Capability.TAG, Capability.ANALYSE}]
    for rt in runtimes:
        for cap in rt.capabilities:
            missing = {m for m in _members(protocols[cap]) if not hasattr(rt, m)}
            assert not missing, (rt.name, cap, missing)


def test_one_refusal_text_names_the_route_and_what_it_needs(tmp_path):
    from headwise.service.engine import Engine

    make_package(tmp_path / "models")
    engine = Engine(Settings(models_dir=tmp_path / "models"), Metrics(), FakeBackend, measure=JSON)
    engine.load_packages()
    rt = engine.get("tiny")
    assert Capability.EMBED.declared(rt) is rt and Capability.CLASSIFY.declared(rt) is None
    assert engine.get("tiny", Capability.ANALYSE) is rt
    assert Capability.RERANK.refusal(rt, "/score", also=(Capability.CLASSIFY,)) == (
        "model 'tiny' is an embedding model: /score needs a re-ranker (a cross-encoder: a classification model "
        "with one label) or a classification model (a classifier or a cross-encoder)")

    class Refused(Validation):
        pass

    with pytest.raises(Refused, match=r"^model 'tiny' is an embedding model: /rerank needs a re-ranker") as e:
        Capability.RERANK.of(rt, "/rerank", error=Refused, field="model")
    assert e.value.field == "model"
