"""ModernBERT's alternating attention is visible in the per-head weights: the local layers see
only the keys within local_attention / 2 of the query, the global layers every real key."""

import torch

from headwise.model.importers import load_checkpoint
from tests.fixtures import families as fam


def test_the_local_window_is_visible_in_the_weights(tmp_path):
    ckpt, _ = fam.make_modernbert(tmp_path)
    model, info = load_checkpoint(ckpt)
    cfg = model.config
    assert (info["family"], cfg.local_window, cfg.global_every) == ("modernbert", 8, 3)
    assert [cfg.is_local(i) for i in range(cfg.n_layers)] == [False, True, True, False]
    ids, mask = fam.padded_batch(cfg.vocab_size, cfg.pad_token_id, lengths=(16, 9))
    with torch.no_grad():
        out = model(ids, mask, need_weights=True, fused=False)
    pos = torch.arange(16)
    far = (pos[None, :] - pos[:, None]).abs() > 4  # (T, T): outside the band
    real = mask.bool()
    for i, w in enumerate(out.attentions):  # (B, H, T, T)
        assert torch.all(w[1][:, real[1]][..., ~real[1]] == 0)  # no real token sees padding
        if cfg.is_local(i):
            assert torch.all(w[0][..., far] == 0), i
        else:
            assert torch.all(w[0][..., far] > 0), i  # the global layer sees far keys
