"""The contact sheet's picks, gathered in bounded heaps over batches, equal a full sort of every image."""

from __future__ import annotations

import numpy as np
import torch

from probcl.tasks.score.extremes import SheetPicks


def test_picks_equal_a_full_sort_with_ties_broken_by_combined_score_then_order():
    rng = np.random.default_rng(0)
    n = 203
    rank = rng.integers(0, 12, n).astype(float)  # many ties
    tiebreak = rng.integers(0, 3, n).astype(float)
    flagged = rank >= 9
    picks = SheetPicks(size=7, flagged=10)
    for start in range(0, n, 32):
        part = slice(start, start + 32)
        index = list(range(n))[part]
        cols = {"index": index, "ood": flagged[part].tolist(), "id": [f"img{i}" for i in index]}
        images = torch.arange(len(index), dtype=torch.uint8).view(-1, 1, 1, 1) + start
        picks.add(images, cols, torch.tensor(rank[part]), torch.tensor(tiebreak[part]))

    def top(indices, size, sign):
        return sorted(indices, key=lambda i: (-sign * rank[i], -sign * tiebreak[i], i))[:size]

    accepted = [i for i in range(n) if not flagged[i]]
    assert [p["index"] for p in picks.flagged.items()] == top([i for i in range(n) if flagged[i]], 10, +1)
    assert [p["index"] for p in picks.least_typical.items()] == top(accepted, 7, +1)
    assert [p["index"] for p in picks.most_typical.items()] == top(accepted, 7, -1)
    assert all(int(p["image"]) == p["index"] for p in picks.flagged.items())  # each image kept with its row
    assert SheetPicks(size=1, flagged=0).flagged.items() == []
