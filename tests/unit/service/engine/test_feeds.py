"""service.engine.feeds: a batch's graph inputs, each row its entry's ids and type ids then
pad_id and 0, its mask 1 on its real tokens less its holes, whatever lengths share the batch."""

from types import SimpleNamespace

import numpy as np

from headwise.service.engine.feeds import batch_feeds


def entry(ids: list[int], types: list[int] | None = None, holes: tuple[int, ...] = ()):
    return SimpleNamespace(ids=np.array(ids, np.int64), type_ids=np.array(types or [0] * len(ids), np.int64),
                           length=len(ids), holes=holes)


def test_rows_are_each_entrys_own():
    package = SimpleNamespace(pad_id=7)
    entries = [entry([101, 5, 102]), entry([101, 1, 2, 3, 4, 102], [0, 0, 0, 1, 1, 1], holes=(2, 4)),
               entry([101, 102]), entry([101, 9, 9, 9, 9, 9, 102])]
    got = batch_feeds(package, entries, 8)
    for i, e in enumerate(entries):
        n = e.length
        assert got["input_ids"][i].tolist() == e.ids.tolist() + [7] * (8 - n)
        assert got["token_type_ids"][i].tolist() == e.type_ids.tolist() + [0] * (8 - n)
        assert got["attention_mask"][i].tolist() == [0 if j in e.holes else int(j < n) for j in range(8)]
    assert {a.dtype for a in got.values()} == {np.dtype(np.int64)}
    assert all(a.shape == (4, 8) for a in got.values())
