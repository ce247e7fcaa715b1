"""What every suite sends: one model package, texts of an exact token length, and the request
bodies built from them. Shared so that the ceiling, headwise and the peers see the same inputs."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np

from bench.cells import VARIANT_FILES
from bench.texts import WORDS, text_of_length
from headwise.service.backends.onnxruntime import inside_graph

ATTENTION_ALL = {"dtype": "float16", "encoding": "base64"}  # every layer and head


def find_package(path: str | Path) -> Path:
    """A package folder (has manifest.json), or a models folder holding exactly one package."""
    p = Path(path)
    if (p / "manifest.json").is_file():
        return p
    found = sorted(m.parent for m in p.glob("*/manifest.json"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise FileNotFoundError(
            f"no model package under {p}; build one with `headwise export --out {p}`")
    raise ValueError(f"{p} holds several packages ({', '.join(f.name for f in found)}); name one")


# a request shape's route: the native answer carries each input's tokens and offsets too, OpenAI's
# its vector alone
ROUTES = {"native": "/v1/embed", "openai": "/v1/embeddings"}


class Workload:
    def __init__(self, package_dir: str | Path):
        from tokenizers import Tokenizer

        self.dir = find_package(package_dir)
        self.manifest = json.loads((self.dir / "manifest.json").read_text())
        self.name = self.manifest["name"]
        self.max_len = int(self.manifest["max_len"])
        self.n_layers = int(self.manifest["n_layers"])
        self.n_heads = int(self.manifest["n_heads"])
        tok_file = self.dir / self.manifest.get("tokenizer", {}).get("file", "tokenizer.json")
        self._full = Tokenizer.from_file(str(tok_file))  # for building texts: no truncation
        self._trunc = Tokenizer.from_file(str(tok_file))  # what the service feeds the graph
        self._trunc.no_padding()
        self._trunc.enable_truncation(max_length=self.max_len)

    def _name(self, variant: str) -> str:
        """The package variant a benchmark variant runs, as the server picks it."""
        if variant == "attention":
            return inside_graph(self.manifest["variants"], "eager") or VARIANT_FILES[variant]
        return VARIANT_FILES[variant]

    def variant_file(self, variant: str) -> Path:
        name = self._name(variant)
        v = self.manifest["variants"].get(name)
        if v is None:
            raise KeyError(f"package {self.name} has no {name} variant")
        return self.dir / v["file"]

    def has(self, variant: str) -> bool:
        return variant in VARIANT_FILES and self._name(variant) in self.manifest["variants"]

    def effective(self, tokens: int) -> int:
        return min(tokens, self.max_len)

    @cache  # noqa: B019 - one Workload per run
    def text(self, tokens: int) -> str:
        return text_of_length(self._full, tokens)

    def texts(self, tokens: int, n: int) -> list[str]:
        """n different texts of exactly `tokens` tokens each (the word list rotated for each)."""
        rotated = (WORDS[i % len(WORDS):] + WORDS[:i % len(WORDS)] for i in range(1, n))
        return [self.text(tokens), *(text_of_length(self._full, tokens, words) for words in rotated)]

    def ids(self, tokens: int) -> tuple[np.ndarray, np.ndarray]:
        enc = self._trunc.encode(self.text(tokens))
        return np.asarray(enc.ids, np.int64), np.asarray(enc.type_ids, np.int64)

    def feeds(self, tokens: int, batch: int, names: list[str]) -> dict[str, np.ndarray]:
        ids, types = self.ids(tokens)
        all_ = {"input_ids": np.tile(ids, (batch, 1)),
                "attention_mask": np.ones((batch, len(ids)), np.int64),
                "token_type_ids": np.tile(types, (batch, 1)),
                "head_mask": np.ones((batch, self.n_layers, self.n_heads), np.float32)}  # every head kept
        return {n: all_[n] for n in names}

    def attention_bytes(self, tokens: int, batch: int, itemsize: int = 4) -> int:
        t = self.effective(tokens)
        return batch * self.n_layers * self.n_heads * t * t * itemsize

    def body(self, tokens: int, attention: bool = False, inputs: int = 1, shape: str = "native") -> bytes:
        """A request of one text (a string) or of `inputs` different texts (a list), in the
        native shape or OpenAI's (`shape="openai"`, no attention)."""
        texts = self.text(tokens) if inputs == 1 else self.texts(tokens, inputs)
        if shape == "openai":
            return json.dumps({"model": self.name, "input": texts}).encode()
        req: dict = {"inputs": texts}
        if attention:
            req["attention"] = dict(ATTENTION_ALL)
        return json.dumps(req).encode()
