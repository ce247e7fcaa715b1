
"""GET /v1/models: every kind's card is built by its runtime from the package and validated by
ModelCard, `created` from the manifest's `created_at` whatever the kind."""

import hashlib
import json
from datetime import datetime

from headwise.service.api.schemas import ModelCard
from headwise.service.api.sizes import JSON
from headwise.service.engine.generation.runtime import GenerativeRuntime
from headwise.service.metrics import Metrics
from headwise.service.package import load_package
from headwise.service.settings import Settings
from tests.unit.fakes import FakeClassifierBackend, client_for, make_package, wait_ready

WHEN = "2026-03-01T12:00:00+00:00"


def _edit(folder, **fields) -> None:
    mf = folder / "manifest.json"
    m = json.loads(mf.read_text())
    m.update(fields)
    mf.write_text(json.dumps(m))


def test_every_encoder_kind_has_its_card_and_created_date(tmp_path):
    root = tmp_path / "models"
    make_package(root, "tiny")
    cls = make_package(root, "zcls")
    _edit(cls, task="classification", labels=["no", "yes"], created_at=WHEN)
    with client_for(cls, backend=FakeClassifierBackend) as c:
        wait_ready(c)
        cards = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
        assert c.get("/v1/models").json()["object"] == "list"
    assert cards["zcls"]["created"] == int(datetime.fromisoformat(WHEN).timestamp())
    assert cards["zcls"]["labels"] == ["no", "yes"] and cards["zcls"]["task"] == "classification"
    assert cards["tiny"]["created"] == 0 and "labels" not in cards["tiny"] and cards["tiny"]["pooling"] == "mean"
    for card in cards.values():
        assert "generate" not in card and "n_encoder_layers" not in card
        assert ModelCard.model_validate(card).model_dump(exclude_unset=True) == card


def test_a_generative_card_validates_with_no_pooling(tmp_path):
    folder = make_package(tmp_path / "models", "gen")
    variants = {}
    for v in ("prefill", "decode"):
        (folder / f"{v}.onnx").write_bytes(v.encode())
        variants[v] = {"file": f"{v}.onnx", "sha256": hashlib.sha256(v.encode()).hexdigest(), "outputs": ["logits"]}
    _edit(folder, architecture="decoder", variants=variants, pooling=None, special_tokens={"eos": 3},
          created_at="2026-03-01T12:00:00")  # no zone: read as UTC
    rt = GenerativeRuntime(load_package(folder), Settings(models_dir=folder), Metrics(), JSON)
    card = ModelCard.model_validate(rt.card()).model_dump(mode="json", exclude_unset=True)
    assert card["pooling"] is None and card["task"] == "generation" and card["generate"]["input"] == "prompt"
    assert card["created"] == int(datetime.fromisoformat(WHEN).timestamp()) and "labels" not in card
