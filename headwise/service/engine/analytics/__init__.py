"""Looking inside beyond the attention every answer may carry: whole operations over an encoder's
analytics batcher, after plain work and on their own budget.

- `explain`: similarity (with its exact token-pair split) and occlusion;
- `importance`: head importance (each head removed in turn);
- `drift`: the head-drift sampler of served traffic;
- `spans`: occlusion's units (words, character spans);
- `cosine`: the cosine and its split, pure numpy;
- `lane`: the analytics' token budget, response share and lowest-priority thread.
"""
