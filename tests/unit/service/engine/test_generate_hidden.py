"""/v1/generate's hidden states without a server: the pure helpers of
service.engine.generation.hidden, and the Stepper fetching them (from the `.attention` form,
only what some row asks for) and handing each row the states of the position that chose its
token."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest
from tokenizers import Tokenizer

from headwise.service.api.sizes import JSON, block_bytes
from headwise.service.engine.generation.batch import Stepper
from headwise.service.engine.generation.hidden import hidden_blocks, prompt_states, step_states
from headwise.service.engine.generation.runtime import _Quiet
from headwise.service.engine.generation.sampling import SamplingParams
from headwise.service.engine.generation.sequence import GenParams, Sequence
from headwise.service.engine.internals import HiddenSpec
from headwise.service.engine.params import AttentionSpec
from headwise.service.engine.size import Size
from tests.fixtures.tiny_generative import gpt2_tokenizer

L, H, DH, D, V = 2, 2, 4, 8, 300


def decode(a: dict, spec: HiddenSpec) -> np.ndarray:
    if spec.encoding == "base64":
        dtype = "<f2" if spec.dtype == "float16" else "<f4"
        return np.frombuffer(base64.b64decode(a["data"]), dtype).reshape(a["shape"])
    return np.asarray(a["data"])


@pytest.mark.parametrize("dtype,encoding", [("float32", "json"), ("float16", "base64"), ("float32", "base64")])
def test_step_states_are_the_chosen_layers_of_one_token(dtype, encoding):
    states = np.random.default_rng(0).standard_normal((L + 1, D)).astype(np.float32)
    for pooling in ("none", "mean", "cls"):
        spec = HiddenSpec((2, 0), pooling, dtype, encoding)
        out = step_states(states, spec)
        assert out["shape"] == [2, D]
        np.testing.assert_array_equal(decode(out, spec), states[[2, 0]].astype(dtype))


def test_prompt_states_as_embed_writes_one_input():
    states = np.random.default_rng(1).standard_normal((L + 1, 5, D)).astype(np.float32)  # [L + 1, P, D]
    none = prompt_states(states, HiddenSpec((1,)))
    assert none["shape"] == [1, 5, D] and set(none) == {"shape", "data"}
    np.testing.assert_array_equal(none["data"], states[[1]])
    mean = prompt_states(states, HiddenSpec((0, 2), "mean"))
    np.testing.assert_allclose(mean["data"], states[[0, 2]].mean(1), rtol=1e-6)
    cls = prompt_states(states, HiddenSpec((2,), "cls"))
    np.testing.assert_array_equal(cls["data"], states[[2], 0])


@pytest.mark.parametrize("dtype,encoding", [("float32", "json"), ("float16", "json"), ("float32", "base64"),
                                            ("float16", "base64")])
@pytest.mark.parametrize("pooling", ["none", "mean"])
def test_hidden_bytes_bound_what_is_written(dtype, encoding, pooling):
    """The bound the 413 and the response budget count holds for the data really written,
    with values as long as JSON makes them."""
    spec = HiddenSpec((0, 1, 2), pooling, dtype, encoding)
    rng = np.random.default_rng(2)
    prompt = (rng.standard_normal((L + 1, 7, D)) * 1e-5 - 1e-5).astype(np.float32)
    steps = [step_states((rng.standard_normal((L + 1, D)) * -1e-5).astype(np.float32), spec) for _ in range(4)]
    written = sum(len(orjson.dumps(s, option=orjson.OPT_SERIALIZE_NUMPY)) for s in steps)
    written_prompt = len(orjson.dumps(prompt_states(prompt, spec), option=orjson.OPT_SERIALIZE_NUMPY))
    def hidden_bytes(prompt: int, new: int) -> int:
        return JSON.bytes(Size(blocks=hidden_blocks(spec, prompt, new, D)))

    assert written <= hidden_bytes(0, 4)
    assert written + written_prompt <= hidden_bytes(7, 4)
    assert hidden_bytes(7, 4) - hidden_bytes(0, 4) >= block_bytes(spec.block(7, D))


class Backend:
    """Graph calls recorded; outputs made up, hidden states [B, L + 1, T, D] marked with their
    position so a test can tell which one a row got."""

    def __init__(self):
        self.calls: list[tuple[str, list[str]]] = []

    def has(self, variant: str) -> bool:
        return True

    def run(self, variant: str, feeds: dict, outputs: list[str]) -> dict:
        self.calls.append((variant, outputs))
        ids = feeds["input_ids"]
        b, t = ids.shape
        total = feeds["attention_mask"].shape[1]
        logits = np.zeros((b, V), np.float32)
        logits[:, 7] = 1
        cache = np.zeros((L, b, H, total, DH), np.float32)
        states = np.broadcast_to(np.arange(total - t, total, dtype=np.float32)[None, None, :, None], (b, L + 1, t, D))
        out = {"logits": logits, "present_keys": cache, "present_values": cache.copy(),
               "attentions": np.full((b, L, H, t, total), 1 / total, np.float32), "hidden_states": states.copy()}
        return {k: out[k] for k in outputs}


def sequence(tok: Tokenizer, prompt: int, hidden: HiddenSpec | None, attention: AttentionSpec | None = None):
    params = GenParams(3, SamplingParams(), 0, (), False, attention, hidden)
    return Sequence(model="g", source_field="prompt", prompt_ids=np.arange(1, prompt + 1, dtype=np.int64),
                    prompt_tokens=[], params=params, limit=3, tokenizer=tok, eos=None, suppress_ids=(),
                    metrics=_Quiet())


def test_stepper_fetches_only_what_rows_ask_and_hands_each_the_choosing_position(tmp_path):
    gpt2_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    backend = Backend()
    stepper = Stepper(backend, "decoder", (L, H, DH), {"pad": 0})
    hid, plain = sequence(tok, 4, HiddenSpec((0, 2))), sequence(tok, 2, None)
    batch, _ = stepper.admit([hid, plain])
    assert backend.calls[-1] == ("prefill.attention", ["logits", "present_keys", "present_values", "hidden_states"])
    stepper.step(batch)
    assert backend.calls[-1] == ("decode.attention", ["logits", "present_keys", "present_values", "hidden_states"])
    stepper.step(batch)
    result = hid.final()["hidden_states"]
    assert result["layers"] == [0, 2] and result["prompt"]["shape"] == [2, 4, D]
    # positions 3 (last prompt token), 4, 5: the ones whose logits chose tokens 0, 1, 2
    assert [s["data"][0][0] for s in result["steps"]] == [3, 4, 5]
    assert hid.steps == [] and plain.hidden_steps == [] and "hidden_states" not in plain.final()

    alone = sequence(tok, 2, None)
    batch, _ = Stepper(backend, "decoder", (L, H, DH), {"pad": 0}).admit([alone])
    assert backend.calls[-1] == ("prefill", ["logits", "present_keys", "present_values"])
    both = sequence(tok, 2, HiddenSpec((1,)), AttentionSpec((0,), (0,), False, False))
    stepper.admit([both])
    assert backend.calls[-1][1] == ["logits", "present_keys", "present_values", "attentions", "hidden_states"]
