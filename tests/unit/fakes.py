"""A tiny model package (real tokenizer.json, placeholder graphs) and a deterministic fake
backend, so the service's HTTP, engine and batching layers are tested without onnxruntime."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "hello", "world", "is", "was", "and", "of", "to", "in", "quick", "brown", "fox", "jumps", "over", "lazy"]
N_LAYERS, N_HEADS, D_MODEL = 2, 3, 8


def make_package(root: Path, name: str = "tiny", max_len: int = 32, normalize: bool = True) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS, ",", ".", "!"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.enable_padding(length=128)  # the package's own padding must be ignored by the service
    tok.save(str(folder / "tokenizer.json"))
    variants = {}
    for v in ("fast", "attention"):
        (folder / f"{v}.onnx").write_bytes(f"placeholder {v}".encode())
        variants[v] = {"file": f"{v}.onnx", "precision": "fp32", "sha256": _sha(folder / f"{v}.onnx"),
                       "outputs": ["sentence_embedding", "last_hidden_state"] + (["attentions"] if v == "attention" else [])}
    manifest = {
        "schema_version": 1, "name": name, "version": "1", "family": "bert", "architecture": "encoder",
        "n_layers": N_LAYERS, "n_heads": N_HEADS, "d_model": D_MODEL, "max_len": max_len,
        "pooling": "mean", "normalize": normalize,
        "tokenizer": {"file": "tokenizer.json", "sha256": _sha(folder / "tokenizer.json"), "pad_id": 0},
        "variants": variants,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def fake_hidden(ids: np.ndarray) -> np.ndarray:
    """[B, T] → [B, T, D]: depends only on each token and its position, never on padding."""
    t = np.arange(ids.shape[1])[None, :, None]
    d = np.arange(D_MODEL)[None, None, :]
    return np.sin(ids[..., None] * (d + 1) * 0.37 + t * 0.11).astype(np.float32)


def fake_attention(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[B, L, H, T, T]; padded keys get exactly 0, real rows sum to 1."""
    q = ids[:, None, None, :, None].astype(np.float64)
    k = ids[:, None, None, None, :].astype(np.float64)
    layer = np.arange(N_LAYERS)[None, :, None, None, None] + 1
    head = np.arange(N_HEADS)[None, None, :, None, None] + 1
    pos = np.arange(ids.shape[1])
    scores = np.cos(q * layer * 0.3 + k * head * 0.7 + (pos[:, None] - pos[None, :]) * 0.2)
    scores = np.where(mask[:, None, None, None, :] > 0, scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)).astype(np.float32)


class FakeBackend:
    provider = "cpu"
    precision = "fp32"
    delay = 0.0  # seconds per run, to let queues build up

    def __init__(self, package, settings):
        self.package = package
        self.variants = {"embed": "fast", "attention": "attention", "analysis": "analysis"}
        self.calls: list[tuple[str, tuple[int, int]]] = []

    def run(self, role, feeds, outputs):
        ids, mask = feeds["input_ids"], feeds["attention_mask"]
        self.calls.append((role, ids.shape))
        if self.delay:
            time.sleep(self.delay)
        hidden = fake_hidden(ids)
        if "head_mask" in feeds:  # the analysis graph: removed heads move every answer of the row
            hidden = hidden * feeds["head_mask"].mean(axis=(1, 2))[:, None, None]
        m = mask[..., None].astype(np.float32)
        pooled = (hidden * m).sum(1) / m.sum(1)
        if self.package.normalize:
            pooled /= np.linalg.norm(pooled, axis=-1, keepdims=True)
        out = {"sentence_embedding": pooled, "last_hidden_state": hidden}
        if role in ("attention", "analysis"):
            out["attentions"] = fake_attention(ids, mask)
        if role == "analysis":  # layer l's state: the last one scaled by (l + 1) / (L + 1)
            n = self.package.n_layers + 1
            out["hidden_states"] = np.stack([hidden * (i + 1) / n for i in range(n)], axis=1)
        return {k: out[k] for k in outputs}


class FakeClassifierBackend(FakeBackend):
    """FakeBackend answering `logits` too: the first n_labels values of the [CLS] hidden state."""

    def run(self, role, feeds, outputs):
        out = super().run(role, feeds, [o for o in outputs if o != "logits"] + ["last_hidden_state"])
        out["logits"] = out["last_hidden_state"][:, 0, :len(self.package.labels)]
        return {k: out[k] for k in outputs}


class FakeNvml:
    """The part of `pynvml` that service.gpu_metrics reads: two devices, the second failing
    when `broken` is set."""

    class NVMLError(Exception):
        pass

    def __init__(self, broken: bool = False):
        self.broken = broken

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        if self.broken and h == 1:
            raise self.NVMLError("GPU is lost")
        return type("Rates", (), {"gpu": 40 + h, "memory": 10})()

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Memory", (), {"used": (h + 1) << 30, "total": 80 << 30, "free": 0})()


# -- the app in-process, with a fake backend ---------------------------------------------------

SECRET_TEXT = "zebra-unicorn-4711"  # never to be echoed in an error body


def client_for(package, backend=FakeBackend, **settings):
    from fastapi.testclient import TestClient

    from headwise.service.api.app import create_app
    from headwise.service.settings import Settings

    app = create_app(Settings(models_dir=package.parent, **settings), backend_factory=backend)
    return TestClient(app)


def wait_ready(client, attempts: int = 2000):
    """Until /health/ready answers 200 (polled, never a time bound on the test's speed)."""
    for _ in range(attempts):
        if client.get("/health/ready").status_code == 200:
            return
        time.sleep(0.005)
    raise AssertionError("never ready")


def assert_error(r, status, type_):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == type_ and err["code"] == status and err["message"]
    assert "Traceback" not in r.text and SECRET_TEXT not in r.text
    return err


class GatedBackend(FakeBackend):
    """Sessions open only once `gate` is set: the app stays live but not ready until then."""

    gate = threading.Event()

    def __init__(self, package, settings):
        self.gate.wait(10)
        super().__init__(package, settings)


class DrivenBatcher:
    """A Batcher run by the engine's own loops (service.engine.lane) over the
    `run(entries, padded)` and optional `prepare(jobs)` a test gives, in place of a model."""

    def __new__(cls, run, limits, buckets, hooks=None, prepare=None, pad_to_bucket=True, **kw):
        from types import SimpleNamespace

        from headwise.service.engine.batching import Batcher
        from headwise.service.engine.lane import Lane

        batcher = Batcher(limits, buckets, hooks, pad_to_bucket=pad_to_bucket, **kw)
        lane = Lane(SimpleNamespace(prepare=prepare, run_batch=lambda role, entries, padded: run(entries, padded),
                                    backend=None))  # a backend without run_async: hops on the inference thread
        start = batcher.start
        batcher.start = lambda: start(lane.serve("embed", batcher), lane.tokenise(batcher) if batcher.overlap else None)
        return batcher


def tei_error(r, status: int, error_type: str) -> str:
    """A TEI error answer's message, once its status, shape and type are checked."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type, body
    assert "Traceback" not in r.text and SECRET_TEXT not in r.text
    return body["error"]
