"""Generative packages (GPT-2, Marian): greedy generation for 20 steps gives the same ids in
our torch model, in the ONNX graphs with their KV cache through onnxruntime, and in
transformers' generate(); every cached step agrees with recomputing the whole sequence.

The ONNX loops (tests/fixtures/generative_onnx.py) use numpy and onnxruntime only, as the
service must (it cannot import model/ or export/); docs/model-package.md describes the same loop.
"""

import json
import shutil

import numpy as np
import onnx
import pytest
import torch

from headwise.export.package import build_package
from headwise.model.importers import load_checkpoint
from headwise.model.transformer import position_ids_from_mask
from tests.fixtures.generative_onnx import (
    Package,
    encode_padded,
    onnx_greedy_decoder,
    onnx_greedy_encoder_decoder,
)
from tests.fixtures.tiny_generative import make_tiny_gpt2, make_tiny_marian

STEPS = 20
PROMPTS = ["the quick brown fox", "hello", "a cat sat on the mat and the dog looks at the red ball"]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    ckpt = make_tiny_gpt2(tmp_path_factory.mktemp("ckpt") / "tiny-gpt2", n_layers=2, n_heads=2, d_model=32)
    pkg = build_package(ckpt, tmp_path_factory.mktemp("pkg"), "gpt2", progress=lambda m: None)
    return ckpt, pkg


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    ckpt = make_tiny_marian(tmp_path_factory.mktemp("ckpt") / "tiny-marian", n_layers=2, n_decoder_layers=3,
                            init_std=0.05, embedding_std=0.01, logits_bias_std=0.05)
    pkg = build_package(ckpt, tmp_path_factory.mktemp("pkg"), "marian", progress=lambda m: None)
    return ckpt, pkg


# --- the two references -----------------------------------------------------------------


def torch_greedy_decoder(model, ids, mask, steps):
    """Our torch model, recomputing the whole sequence at every step (no cache)."""
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
    for _ in range(steps):
        with torch.no_grad():
            logits = model(ids, mask, position_ids=position_ids_from_mask(mask)).logits[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return ids[:, -steps:].numpy()


def torch_greedy_encoder_decoder(model, src, src_mask, start, suppress, steps):
    src, src_mask = torch.from_numpy(src), torch.from_numpy(src_mask)
    with torch.no_grad():
        memory = model.encode(src, src_mask).last_hidden_state
        tgt = torch.full((src.size(0), 1), start)
        for _ in range(steps):
            logits = model.decoder(tgt, None, memory, src_mask).logits[:, -1]
            logits[:, suppress] = -torch.inf
            tgt = torch.cat([tgt, logits.argmax(-1, keepdim=True)], 1)
    return tgt.numpy()


def hf_generate(model, steps, ids, mask, eos=None, pad=None):
    """transformers' greedy search; eos None runs every step (a tiny random model may emit
    its eos early, and generate() would stop there)."""
    model.generation_config.eos_token_id = eos
    if pad is not None:
        model.generation_config.pad_token_id = pad
    with torch.no_grad():
        out = model.generate(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                             do_sample=False, num_beams=1, max_new_tokens=steps, min_new_tokens=0)
    return out.numpy()


def mid_run_token(row):
    """The first token of a greedy run that differs from its first one: as eos, it ends the
    run part-way."""
    return int(next(t for t in row if t != row[0]))


# --- GPT-2 ------------------------------------------------------------------------------


@pytest.mark.parametrize("texts", [PROMPTS[:1], PROMPTS], ids=["one-prompt", "left-padded-batch"])
def test_gpt2_greedy_20_steps_identical_in_torch_onnx_and_transformers(gpt2, texts):
    from transformers import GPT2LMHeadModel

    ckpt, path = gpt2
    pkg = Package(path)
    ids, mask = encode_padded(pkg, texts, left=True)
    via_onnx = onnx_greedy_decoder(pkg, ids, mask, STEPS)
    ours, _ = load_checkpoint(ckpt)
    via_torch = torch_greedy_decoder(ours, ids, mask, STEPS)
    hf = GPT2LMHeadModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    via_hf = hf_generate(hf, STEPS, ids, mask, pad=pkg.special["pad"])
    assert via_onnx.shape == (len(texts), STEPS)
    np.testing.assert_array_equal(via_onnx, via_torch)
    np.testing.assert_array_equal(via_onnx, via_hf[:, ids.shape[1]:])
    assert len({tuple(r) for r in via_onnx}) == len(texts)  # prompts lead to different paths
    assert all(len(set(r)) > 2 for r in via_onnx.tolist())  # not one token repeated


def test_gpt2_every_decode_step_matches_recomputing_the_sequence(gpt2):
    pkg = Package(gpt2[1])
    ids, mask = encode_padded(pkg, PROMPTS, left=True)
    onnx_greedy_decoder(pkg, ids, mask, STEPS, recompute=True)


def test_gpt2_stops_at_eos_like_transformers(gpt2):
    """With eos set to a token the run emits part-way, rows stop there and pad afterwards;
    generation ends when every row has."""
    from transformers import GPT2LMHeadModel

    ckpt, path = gpt2
    pkg = Package(path)
    ids, mask = encode_padded(pkg, PROMPTS, left=True)
    eos = mid_run_token(onnx_greedy_decoder(pkg, ids, mask, STEPS)[0])
    via_onnx = onnx_greedy_decoder(pkg, ids, mask, STEPS, eos=eos)
    hf = GPT2LMHeadModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    via_hf = hf_generate(hf, STEPS, ids, mask, eos, pkg.special["pad"])
    np.testing.assert_array_equal(via_onnx, via_hf[:, ids.shape[1]:])
    first = int(np.argmax(via_onnx[0] == eos))
    assert 0 < first < STEPS - 1 and np.all(via_onnx[0, first + 1 :] == pkg.special["pad"])


# --- Marian -----------------------------------------------------------------------------


@pytest.mark.parametrize("texts", [PROMPTS[:1], PROMPTS], ids=["one-source", "padded-batch"])
def test_marian_greedy_20_steps_identical_in_torch_onnx_and_transformers(marian, texts):
    from transformers import MarianMTModel

    ckpt, path = marian
    pkg = Package(path)
    src, src_mask = encode_padded(pkg, texts, left=False)
    via_onnx = onnx_greedy_encoder_decoder(pkg, src, src_mask, STEPS)
    ours, _ = load_checkpoint(ckpt)
    via_torch = torch_greedy_encoder_decoder(ours, src, src_mask, pkg.special["decoder_start"], pkg.suppress, STEPS)
    hf = MarianMTModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    via_hf = hf_generate(hf, STEPS, src, src_mask)
    assert via_onnx.shape == (len(texts), 1 + STEPS)
    np.testing.assert_array_equal(via_onnx, via_torch)
    np.testing.assert_array_equal(via_onnx, via_hf)
    assert not np.isin(via_onnx[:, 1:], pkg.suppress).any()
    assert len({tuple(r) for r in via_onnx}) == len(texts)
    assert all(len(set(r)) > 2 for r in via_onnx.tolist())


def test_marian_every_decoder_step_matches_recomputing_the_sequence(marian):
    pkg = Package(marian[1])
    src, src_mask = encode_padded(pkg, PROMPTS, left=False)
    onnx_greedy_encoder_decoder(pkg, src, src_mask, STEPS, recompute=True)


def test_marian_stops_at_eos_like_transformers(marian):
    from transformers import MarianMTModel

    ckpt, path = marian
    pkg = Package(path)
    src, src_mask = encode_padded(pkg, PROMPTS, left=False)
    eos = mid_run_token(onnx_greedy_encoder_decoder(pkg, src, src_mask, STEPS)[0, 1:])
    via_onnx = onnx_greedy_encoder_decoder(pkg, src, src_mask, STEPS, eos=eos)
    hf = MarianMTModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    via_hf = hf_generate(hf, STEPS, src, src_mask, eos)
    np.testing.assert_array_equal(via_onnx, via_hf)
    first = int(np.argmax(via_onnx[0] == eos))
    assert 1 < first < STEPS and np.all(via_onnx[0, first + 1 :] == pkg.special["pad"])


# --- hidden states ----------------------------------------------------------------------


def test_decoder_hidden_states_equal_transformers_and_change_nothing_else(gpt2, marian):
    """Decoder.forward(output_hidden_states=True): transformers' `output_hidden_states`
    (the last after the final norm where there is one) within 1e-5; logits, cache and the
    last hidden state bit-identical to a call that does not ask."""
    from transformers import GPT2LMHeadModel, MarianMTModel

    ids = torch.tensor([[5, 17, 42, 9, 100, 3]])
    ours, _ = load_checkpoint(gpt2[0])
    hf = GPT2LMHeadModel.from_pretrained(str(gpt2[0]), attn_implementation="eager").eval()
    with torch.no_grad():
        plain, got = ours(ids), ours(ids, output_hidden_states=True)
        want = hf(ids, output_hidden_states=True).hidden_states
    assert plain.hidden_states is None and len(got.hidden_states) == len(want) == 3
    torch.testing.assert_close(torch.stack(got.hidden_states), torch.stack(want), atol=1e-5, rtol=0)
    assert torch.equal(plain.logits, got.logits) and torch.equal(plain.last_hidden_state, got.last_hidden_state)
    assert all(torch.equal(torch.stack(p), torch.stack(q)) for p, q in zip(plain.present, got.present, strict=True))

    ours, _ = load_checkpoint(marian[0])
    hf = MarianMTModel.from_pretrained(str(marian[0]), attn_implementation="eager").eval()
    src, tgt = torch.tensor([[4, 8, 15, 16, 0]]), torch.tensor([[ours.config.vocab_size - 1, 3, 12]])
    with torch.no_grad():
        (_, dec), (_, plain) = ours(src, tgt, output_hidden_states=True), ours(src, tgt)
        want = hf(input_ids=src, decoder_input_ids=tgt, output_hidden_states=True).decoder_hidden_states
    assert len(dec.hidden_states) == len(want) == 4
    torch.testing.assert_close(torch.stack(dec.hidden_states), torch.stack(want), atol=1e-5, rtol=0)
    assert torch.equal(plain.logits, dec.logits) and plain.hidden_states is None


# --- the package itself -----------------------------------------------------------------


def assert_embedding_stored_once(path, manifest):
    """The output projection reads the token embedding as is: no transposed copy (for
    GPT-2 small that copy would be 154 MB more per file)."""
    for spec in manifest["variants"].values():
        graph = onnx.load(str(path / spec["file"])).graph
        assert sum(manifest["vocab_size"] in t.dims for t in graph.initializer) == 1, spec["file"]


def test_decoder_package_layout_and_shapes(gpt2):
    pkg = Package(gpt2[1])
    m = pkg.manifest
    assert m["architecture"] == "decoder" and m["family"] == "gpt2"
    assert set(m["variants"]) == {"prefill", "prefill.attention", "decode", "decode.attention"}
    for v, spec in m["variants"].items():
        s = pkg.sessions[v]
        assert [i.name for i in s.get_inputs()] == [i["name"] for i in m["inputs"][v]]
        assert [o.name for o in s.get_outputs()] == spec["outputs"] == [o["name"] for o in m["outputs"][v]]
    assert set(m["parity"]) == set(m["variants"])
    assert_embedding_stored_once(gpt2[1], m)
    ids, mask = encode_padded(pkg, PROMPTS[:2], left=True)
    pre = pkg.run("prefill.attention", input_ids=ids, attention_mask=mask)
    L, H, t = m["n_layers"], m["n_heads"], ids.shape[1]
    assert pre["logits"].shape == (2, m["vocab_size"])
    assert pre["present_keys"].shape == (L, 2, H, t, m["d_head"])
    att = pre["attentions"]
    assert att.shape == (2, L, H, t, t)
    assert pre["hidden_states"].shape == (2, L + 1, t, m["d_model"])  # [B, L + 1, T_new, D]
    assert "hidden_states" not in m["variants"]["prefill"]["outputs"]
    assert m["outputs"]["decode.attention"][-1] == {"name": "hidden_states", "dtype": "float32",
                                                    "shape": ["batch", L + 1, "seq", m["d_model"]]}
    assert m["parity"]["decode.attention"]["hidden_states"] < 1e-4
    real = mask.astype(bool)
    np.testing.assert_allclose(att.sum(-1), 1, atol=1e-5)
    future = np.triu(np.ones((t, t), bool), 1)
    for b in range(2):
        rows = att[b][:, :, real[b]]  # (L, H, real queries, keys)
        assert np.all(rows[:, :, future[real[b]]] == 0)  # no real query sees the future
        assert np.all(rows[..., ~real[b]] == 0)  # nor padding


def test_encoder_decoder_package_layout_and_shapes(marian):
    pkg = Package(marian[1])
    m = pkg.manifest
    assert m["architecture"] == "encoder-decoder" and m["family"] == "marian"
    assert set(m["variants"]) == {"encoder", "encoder.attention", "decoder_step", "decoder_step.attention"}
    assert (m["n_encoder_layers"], m["n_decoder_layers"], m["n_layers"]) == (2, 3, 3)
    assert m["special_tokens"]["decoder_start"] == m["special_tokens"]["pad"]
    assert_embedding_stored_once(marian[1], m)
    src, src_mask = encode_padded(pkg, PROMPTS, left=False)
    enc = pkg.run("encoder.attention", input_ids=src, attention_mask=src_mask)
    s = src.shape[1]
    assert enc["attentions"].shape == (3, 2, m["n_heads"], s, s)
    assert enc["cross_keys"].shape == (3, 3, m["n_heads"], s, m["d_head"])
    out = pkg.run("decoder_step.attention", input_ids=np.full((3, 1), m["special_tokens"]["decoder_start"]),
                  attention_mask=np.ones((3, 1), np.int64), encoder_attention_mask=src_mask, cross_keys=enc["cross_keys"], cross_values=enc["cross_values"],
                  past_keys=pkg.empty_cache(3), past_values=pkg.empty_cache(3))
    cross = out["cross_attentions"]
    assert cross.shape == (3, 3, m["n_heads"], 1, s)  # [B, L, H, 1, T_src] per step
    assert out["hidden_states"].shape == (3, 4, 1, m["d_model"])  # [B, L + 1, T_new, D]
    assert m["parity"]["decoder_step.attention"]["hidden_states"] < 1e-4
    assert "hidden_states" not in m["variants"]["encoder.attention"]["outputs"]
    np.testing.assert_allclose(cross.sum(-1), 1, atol=1e-5)
    assert np.all(cross[1][..., ~src_mask[1].astype(bool)] == 0)


def test_cli_exports_gpt2_and_refuses_a_checkpoint_without_tokenizer_json(tmp_path, capsys):
    from headwise.cli import main

    ckpt = make_tiny_gpt2(tmp_path / "ckpt", n_layers=1)
    assert main(["export", str(ckpt), "--name", "g", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "[3/3] verify parity" in out and "decode.attention" in out
    assert json.loads((tmp_path / "out/g/manifest.json").read_text())["architecture"] == "decoder"
    (ckpt / "tokenizer.json").unlink()
    assert main(["export", str(ckpt), "--out", str(tmp_path / "out2")]) == 1
    assert "sentencepiece" in capsys.readouterr().err
    assert not (tmp_path / "out2" / "ckpt").exists()


# --- joining sequences of different lengths in one batch (continuous batching) ----------


def pad_axis(x, n, axis, left=True):
    """n zeros before (left) or after the data along axis; the masks then mark them 0."""
    width = [(0, 0)] * x.ndim
    width[axis] = (n, 0) if left else (0, n)
    return np.pad(x, width)


def test_gpt2_caches_of_different_lengths_join_by_left_padding(gpt2):
    """Two requests prefilled apart (6 and 3 tokens) decode together: the shorter cache is
    left-padded with zeros, its attention_mask with 0, and each row's logits are what it
    gets alone."""
    pkg = Package(gpt2[1])
    alone = []
    for text in ("the quick brown fox jumps over", "a red ball"):
        ids, mask = encode_padded(pkg, [text], left=True)
        pre = pkg.run("prefill", input_ids=ids, attention_mask=mask)
        alone.append((pre, mask))
    n = [m.shape[1] for _, m in alone]
    assert n[0] > n[1]
    gap = n[0] - n[1]
    keys = np.concatenate([alone[0][0]["present_keys"], pad_axis(alone[1][0]["present_keys"], gap, 3)], 1)
    values = np.concatenate([alone[0][0]["present_values"], pad_axis(alone[1][0]["present_values"], gap, 3)], 1)
    mask = np.concatenate([alone[0][1], pad_axis(alone[1][1], gap, 1)], 0)
    token = np.array([[7], [42]])
    mask = np.concatenate([mask, np.ones((2, 1), np.int64)], 1)
    joined = pkg.run("decode.attention", input_ids=token, attention_mask=mask, past_keys=keys, past_values=values)
    for row, (pre, m) in enumerate(alone):
        own = pkg.run("decode.attention", input_ids=token[row : row + 1],
                      attention_mask=np.concatenate([m, [[1]]], 1),
                      past_keys=pre["present_keys"], past_values=pre["present_values"])
        np.testing.assert_allclose(joined["logits"][row], own["logits"][0], atol=1e-5, rtol=0)
        real = mask[row].astype(bool)
        np.testing.assert_allclose(joined["attentions"][row][..., real], own["attentions"][0], atol=1e-6)
        assert np.all(joined["attentions"][row][..., ~real] == 0)


def test_marian_steps_of_different_lengths_join_by_padding(marian):
    """A request 4 steps in and one 1 step in, with sources of different lengths, step
    together: target caches left-padded (attention_mask 0), source keys/values right-padded
    (encoder_attention_mask 0)."""
    pkg = Package(marian[1])
    start = pkg.special["decoder_start"]
    states = []
    for text, steps in (("the cat sat on the mat", 4), ("hello", 1)):
        src, src_mask = encode_padded(pkg, [text], left=False)
        enc = pkg.run("encoder", input_ids=src, attention_mask=src_mask)
        tgt = onnx_greedy_encoder_decoder(pkg, src, src_mask, steps)  # (1, 1 + steps)
        out = pkg.run("decoder_step", input_ids=tgt[:, :-1], attention_mask=np.ones_like(tgt[:, :-1]),
                      encoder_attention_mask=src_mask, cross_keys=enc["cross_keys"],
                      cross_values=enc["cross_values"], past_keys=pkg.empty_cache(1),
                      past_values=pkg.empty_cache(1))  # the cache of every token but the last
        states.append({"tgt": tgt, "src_mask": src_mask, "enc": enc, "out": out})
    assert states[0]["tgt"][0, 0] == start
    t_gap = states[0]["tgt"].shape[1] - states[1]["tgt"].shape[1]
    s_gap = states[0]["src_mask"].shape[1] - states[1]["src_mask"].shape[1]
    a, b = states

    def join(x_a, x_b, gap, axis, left, batch_axis):
        return np.concatenate([x_a, pad_axis(x_b, gap, axis, left)], batch_axis)

    feeds = {
        "input_ids": np.concatenate([a["tgt"][:, -1:], b["tgt"][:, -1:]], 0),
        "attention_mask": join(np.ones_like(a["tgt"]), np.ones_like(b["tgt"]), t_gap, 1, True, 0),
        "encoder_attention_mask": join(a["src_mask"], b["src_mask"], s_gap, 1, False, 0),
        "past_keys": join(a["out"]["present_keys"], b["out"]["present_keys"], t_gap, 3, True, 1),
        "past_values": join(a["out"]["present_values"], b["out"]["present_values"], t_gap, 3, True, 1),
        "cross_keys": join(a["enc"]["cross_keys"], b["enc"]["cross_keys"], s_gap, 3, False, 1),
        "cross_values": join(a["enc"]["cross_values"], b["enc"]["cross_values"], s_gap, 3, False, 1),
    }
    joined = pkg.run("decoder_step.attention", **feeds)
    for row, st in enumerate(states):
        own = pkg.run("decoder_step.attention", input_ids=st["tgt"][:, -1:], attention_mask=np.ones_like(st["tgt"]),
                      encoder_attention_mask=st["src_mask"], cross_keys=st["enc"]["cross_keys"],
                      cross_values=st["enc"]["cross_values"], past_keys=st["out"]["present_keys"],
                      past_values=st["out"]["present_values"])
        np.testing.assert_allclose(joined["logits"][row], own["logits"][0], atol=1e-5, rtol=0)
        src_real = feeds["encoder_attention_mask"][row].astype(bool)
        np.testing.assert_allclose(joined["cross_attentions"][row][..., src_real], own["cross_attentions"][0],
                                   atol=1e-6)


@pytest.mark.parametrize("which", ["gpt2", "marian"])
def test_cli_verify_checks_generative_packages(which, request, tmp_path, capsys):
    from headwise.cli import main

    ckpt, pkg = request.getfixturevalue(which)
    assert main(["verify", str(pkg), "--checkpoint", str(ckpt)]) == 0
    assert main(["verify", str(pkg)]) == 1
    assert "--checkpoint" in capsys.readouterr().err
    copy = tmp_path / "copy"
    shutil.copytree(pkg, copy)
    victim = next(copy.glob("*.onnx"))
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))
    assert main(["verify", str(copy), "--checkpoint", str(ckpt)]) == 1
    assert victim.name in capsys.readouterr().err
