"""An unlabelled dataset reaching a step that needs labels fails with one message naming the problem."""

from __future__ import annotations

import pytest
import torch

from probcl.data.sources import labeled_subset
from probcl.errors import DatasetError


def test_no_labels_is_a_dataset_error_not_an_empty_concatenation():
    with pytest.raises(DatasetError, match="no class labels"):
        labeled_subset(torch.full((5,), -1), 0.5)


def test_a_labelled_subset_keeps_at_least_one_item_per_class():
    labels = torch.tensor([0, 0, 0, 1, -1])
    chosen = labeled_subset(labels, 0.1)
    assert set(labels[chosen].tolist()) == {0, 1}
