"""bench.experiments.tokie_ascii re-derives a continuation piece's span from its token."""

from bench.experiments.tokie_ascii import fixed


def test_continuation_pieces_start_where_the_last_ended_and_span_their_token_less_the_prefix():
    tokens = ["[CLS]", "the", "co", "##uga", "##r", ".", "[SEP]"]
    shifted = [(0, 0), (0, 3), (4, 6), (6, 11), (11, 14), (10, 11), (0, 0)]  # "the cougar."
    assert fixed(shifted, tokens, "##") == [(0, 0), (0, 3), (4, 6), (6, 9), (9, 10), (10, 11), (0, 0)]
