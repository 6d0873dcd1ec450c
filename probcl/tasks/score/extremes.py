"""The images the contact sheet shows, gathered in one bounded-memory pass: every flagged image (the most
unusual ones when there are more than the sheet holds) and the extremes of the accepted ones."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

Key = tuple[float, float, int]


class TopK:
    """The ``size`` items with the largest keys offered so far (a bounded min-heap); keys are unique."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.heap: list[tuple[Key, dict[str, Any]]] = []

    def offer(self, key: Key, item: Callable[[], dict[str, Any]]) -> None:
        """Keep the item ``item()`` under ``key`` if it ranks among the largest (``item`` runs only then)."""
        if len(self.heap) < self.size:
            heapq.heappush(self.heap, (key, item()))
        elif self.size and key > self.heap[0][0]:
            heapq.heapreplace(self.heap, (key, item()))

    def items(self) -> list[dict[str, Any]]:
        """The kept items, largest key first."""
        return [item for _, item in sorted(self.heap, key=lambda entry: entry[0], reverse=True)]


def _row(images: torch.Tensor, cols: dict[str, list], i: int) -> dict[str, Any]:
    return {"image": images[i].clone(), **{name: col[i] for name, col in cols.items()}}


class SheetPicks:
    """Flagged images ranked by the deciding score (at most ``flagged`` kept), and the ``size`` accepted images
    with the highest and the lowest deciding score; ties go to the combined score, then to the earlier image."""

    def __init__(self, size: int, flagged: int) -> None:
        self.flagged = TopK(flagged)
        self.least_typical = TopK(size)
        self.most_typical = TopK(size)

    def add(self, images: torch.Tensor, cols: dict[str, list], rank: torch.Tensor, tiebreak: torch.Tensor) -> None:
        """One batch: its uint8 ``images``, output columns and per-image deciding and combined scores."""
        for i, (r, t) in enumerate(zip(rank.tolist(), tiebreak.tolist())):
            order, row = cols["index"][i], partial(_row, images, cols, i)
            if cols["ood"][i]:
                self.flagged.offer((r, t, -order), row)
            else:
                self.least_typical.offer((r, t, -order), row)
                self.most_typical.offer((-r, -t, -order), row)
