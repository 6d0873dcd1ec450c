"""Dataset spec syntax (torch-free): the forms ``--dataset`` takes besides a registered name."""

from __future__ import annotations

CLASS_FILTER = ":classes="  # `fashion-mnist:classes=0-7`: only these classes, relabelled 0..K-1 in the given order
# dataset specs besides the registered names: paths, and a class filter on a registered name
SPEC_FORMS = ["folder:PATH[:stream=false]", "npz:PATH", f"NAME{CLASS_FILTER}0-7 (or 8,9)"]
