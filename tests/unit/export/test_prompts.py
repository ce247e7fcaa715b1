"""export.prompts: a checkpoint's sentence-transformers prompts and default prompt, and the
Matryoshka dimensions the export is told, written into the manifest and read back by the
service; a bad file or option stops the export before any graph is written."""

import json
from types import SimpleNamespace

import pytest

from headwise.export.cli_export import parse_dimensions
from headwise.export.manifest import read
from headwise.export.package import build_package
from headwise.export.pipeline import Options
from headwise.export.prompts import declared_facts, read_prompts
from headwise.model.importers import CheckpointError
from headwise.service.package import load_package
from tests.fixtures.prompts import PROMPTS, make_prompted_bert


def write_config(path, **cfg):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    return path


def test_prompts_and_default_as_sentence_transformers_reads_them(tmp_path):
    got = read_prompts(write_config(tmp_path, prompts={"query": "query: ", "x": None}, default_prompt_name="query"))
    assert got == {"prompts": {"query": "query: ", "x": ""}, "default_prompt_name": "query"}  # null: empty
    assert read_prompts(tmp_path / "none") == {"prompts": {}, "default_prompt_name": None}
    assert read_prompts(write_config(tmp_path / "old", __version__={"sentence_transformers": "2.2.2"})) == \
        {"prompts": {}, "default_prompt_name": None}  # hub models saved before prompts existed


@pytest.mark.parametrize("cfg", [{"prompts": ["query: "]}, {"prompts": {"q": 3}},
                                 {"prompts": {"q": "q: "}, "default_prompt_name": "d"}])
def test_bad_prompts_are_refused_naming_the_file(tmp_path, cfg):
    with pytest.raises(CheckpointError, match=r"config_sentence_transformers\.json"):
        read_prompts(write_config(tmp_path, **cfg))


def test_matryoshka_dimensions_are_for_embedding_models_within_their_size(tmp_path):
    loaded = SimpleNamespace(model=SimpleNamespace(head=SimpleNamespace(), config=SimpleNamespace(d_model=32)))
    with pytest.raises(ValueError, match="embedding models; this is a classification model"):
        declared_facts("classification", loaded, None, Options(matryoshka_dimensions=(8,)))
    assert declared_facts("classification", loaded, None, Options()) == {}
    with pytest.raises(ValueError, match=r"64 not in 1\.\.32"):
        declared_facts("embedding", loaded, tmp_path, Options(matryoshka_dimensions=(8, 64)))
    assert parse_dimensions("8, 16,") == (8, 16)
    with pytest.raises(ValueError):
        parse_dimensions("8,x")


def test_an_export_carries_the_prompts_and_matryoshka_dimensions(tmp_path):
    ckpt = make_prompted_bert(tmp_path / "ckpt", default_prompt_name="query")
    pkg = build_package(ckpt, tmp_path / "models", "prompted", int8=False, fp16=False, check=False,
                        quality=False, progress=lambda m: None, matryoshka_dimensions=(8, 16))
    m = read(pkg)
    assert m["prompts"] == {**PROMPTS, "empty": ""} and m["default_prompt_name"] == "query"
    assert m["matryoshka_dimensions"] == [16, 8]
    served = load_package(pkg)
    assert served.prompts == m["prompts"] and served.default_prompt_name == "query"
    assert served.matryoshka_dimensions == (16, 8)


def test_pooling_that_leaves_the_prompt_out_is_refused_with_prompts(tmp_path):
    ckpt = make_prompted_bert(tmp_path / "ckpt")
    cfg = json.loads((ckpt / "1_Pooling/config.json").read_text())
    (ckpt / "1_Pooling/config.json").write_text(json.dumps({**cfg, "include_prompt": False}))
    with pytest.raises(CheckpointError, match="include_prompt: false"):
        build_package(ckpt, tmp_path / "models", "bad", check=False, quality=False, progress=lambda m: None)


def test_a_bad_matryoshka_option_stops_the_export_before_any_graph(tmp_path):
    ckpt = make_prompted_bert(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="--matryoshka-dimensions"):
        build_package(ckpt, tmp_path / "models", "bad", check=False, quality=False, progress=lambda m: None,
                      matryoshka_dimensions=(33,))
    assert list((tmp_path / "models").iterdir()) == []  # the partial folder is gone too
