"""MPNet's relative position buckets (model/relative.py) against transformers' own function."""

import torch

from headwise.model.relative import RelativePositionBias, relative_position_bucket


def test_buckets_equal_transformers_over_every_distance_to_a_thousand():
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    d = torch.arange(-1000, 1001)
    assert torch.equal(relative_position_bucket(d), MPNetEncoder.relative_position_bucket(d))
    assert relative_position_bucket(d).max() == 31 and relative_position_bucket(d).min() == 0


def test_the_bias_depends_on_the_distance_alone():
    torch.manual_seed(0)
    bias = RelativePositionBias(n_heads=3)(9)  # (1, H, T, T)
    assert bias.shape == (1, 3, 9, 9)
    for k in range(-8, 9):  # every diagonal is constant
        diag = torch.diagonal(bias[0], offset=k, dim1=-2, dim2=-1)  # (H, T - |k|)
        assert torch.equal(diag, diag[:, :1].expand_as(diag))
