"""bench.families' pure parts: texts of exact lengths for a package's tokenizer, and the report
(every family and shape, a refused family named). No timing is asserted."""

from __future__ import annotations

from bench.families import FAMILIES, report, texts_of
from headwise.service.engine.tokenizer import TextTokenizer


def test_texts_have_exactly_the_tokens_asked_for_and_differ(tiny_package):
    texts = texts_of(tiny_package / "tokenizer.json", 4, 20)
    tok = TextTokenizer(tiny_package / "tokenizer.json", 512)
    assert [e.length for e in tok.encode(texts)] == [20] * 4 and len(set(texts)) == 4


def test_the_report_has_every_family_and_shape():
    rows = [{"family": "bert", "fused": "Attention × 6", "shapes": {
                (16, 128): {"headwise_ms": 10.0, "st_ms": 20.0, "ratio": 2.0, "cosine": 1.0},
                (1, 20): {"headwise_ms": 1.0, "st_ms": 3.0, "ratio": 3.0, "cosine": 0.9999999}}},
            {"family": "qwen3", "refused": "unknown architecture model_type='qwen3'"}]
    text = report(rows, "python -m bench.families", 2, 7)
    assert "| bert | 16 × 128 | 10.00 | 20.00 | 2.00× | 1.0000000 | Attention × 6 |" in text
    assert "| bert | 1 × 20 |" in text and "| qwen3 | – |" in text and "not supported" in text
    assert set(FAMILIES) >= {"bert", "xlm-roberta", "distilbert", "mpnet", "qwen3", "modernbert"}
