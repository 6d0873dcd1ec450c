"""The OOD-score registry: every score's name, meaning, kind, direction, fit and scoring in one entry.

An entry (:class:`OodScore`) says how the score is fitted on the ID training data (:class:`FitData` -> a state
of plain tensors and numbers, saved in ``probcl score``'s cache; None when the score does not apply to this run)
and how it scores a batch (state, :class:`ScoreBatch` -> one outlier score per image, higher = more OOD). The
``ood`` suite, ``probcl score`` (its columns, ``--score`` / ``--combination`` choices and help), the cache key
(:meth:`ScoreRegistry.fingerprint`), the docs table (:meth:`ScoreRegistry.markdown_table`) and the tests all
read :data:`SCORES`; ``docs/adding-a-score.md`` shows how to add one.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import torch

from probcl.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    from probcl.eval.ood_scores.head import LinearHead

Kind = Literal["feature distance", "classifier head", "input guard", "own uncertainty"]
KINDS: dict[str, str] = {
    "feature distance": "a distance of the backbone features to the training features",
    "classifier head": "a function of a linear classifier head on the features (the probe)",
    "input guard": "catches degenerate inputs (blank, noise, wrong contrast) whatever the encoder does with them",
    "own uncertainty": "the method's own uncertainty, from a declared capability",
}
GUARD_KINDS = frozenset({"input guard", "own uncertainty"})  # share the combination's guard budget


@dataclass
class FitData:
    """What a score can be fitted on: the ID training split's features, labels (-1 = unlabeled) and input
    statistics, a linear classifier head on the features when there is one, and the declared capabilities'
    training outputs."""

    features: torch.Tensor  # (N, d)
    labels: torch.Tensor  # (N,)
    input_stats: torch.Tensor  # (N, 7)
    head: LinearHead | None = None
    encoder_means: torch.Tensor | None = None  # (N, e) unit encoder means of a StochasticEncoder
    concentration: float | None = None  # its kappa_e
    energy_reference: torch.Tensor | None = None  # (M, p) projections of an EnergyModel
    uncertainty_names: list[str] = field(default_factory=list)  # names a HasUncertainty method declares

    @property
    def labeled(self) -> bool:
        return bool((self.labels >= 0).any())


@dataclass
class ScoreBatch:
    """A batch's model outputs (``features``, ``input_stats`` and the capabilities' outputs, float32 on the CPU),
    with two memos: ``shared`` lives as long as the fitted reference (e.g. a float64 copy of a feature bank),
    ``memo`` as long as the batch (e.g. nearest-neighbour distances several kNN scores read)."""

    outputs: dict[str, torch.Tensor]
    shared: dict[Any, Any] = field(default_factory=dict)
    memo: dict[Any, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.outputs[name]

    @staticmethod
    def remember(store: dict[Any, Any], key: Any, make: Callable[[], Any]) -> Any:
        """``store[key]``, made once."""
        if key not in store:
            store[key] = make()
        return store[key]


KNN_FAMILY = "knn{k}"  # kNN distances on L2-normalised features
RAW_KNN_FAMILY = "knn{k}_raw"  # kNN distances on raw features
# The default combination's kNN distance: to the nearest raw training feature (k = 1), the kNN member of the
# candidate that issue 42's committed rule chose on the development cells (docs/ood-default-rule.md).
COMBINATION_KNN_FAMILY = RAW_KNN_FAMILY
COMBINATION_KNN_K = 1


def knn_name(k: int, normalized: bool) -> str:
    """``knn{k}`` (L2-normalised features) or ``knn{k}_raw``."""
    return f"knn{k}" if normalized else f"knn{k}_raw"


def combination_knn(k: int = COMBINATION_KNN_K) -> str:
    """The name of the default combination's kNN distance at ``k`` neighbours (``knn1_raw`` by default)."""
    return knn_name(k, normalized=COMBINATION_KNN_FAMILY == KNN_FAMILY)


State = dict[str, Any]


@dataclass(frozen=True)
class OodScore:
    """One registered score (see the module docstring)."""

    name: str
    description: str  # one line: what it measures (higher = more OOD)
    kind: Kind
    fit: Callable[[FitData], State | None]  # the saved state; None: not available for this run
    score: Callable[[State, ScoreBatch], torch.Tensor]  # (N,) outlier scores
    two_sided: bool = False  # an image can fail it too high or too low (tail probabilities are two-sided)
    in_default: bool = False  # a member of the default combination when available
    replaces: str | None = None  # joins the default combination in place of this score when that is unavailable
    family: str | None = None  # the template of a parametrised family (``knn{k}``): one member in the default
    neighbours: int | None = None  # a kNN distance's k (a bank with fewer training features uses all of them)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"OOD score {self.name!r}: unknown kind {self.kind!r}; valid: {', '.join(KINDS)}")

    @property
    def guard(self) -> bool:
        """Shares the combination's guard budget (not a distance in the representation)."""
        return self.kind in GUARD_KINDS


@dataclass(frozen=True)
class Family:
    """Scores made on demand from a name pattern, e.g. ``knn{k}`` for any k or ``uncertainty:NAME``."""

    template: str  # as the docs name it
    pattern: re.Pattern[str]
    make: Callable[[re.Match[str]], OodScore]
    description: str  # what its members measure, in the template's terms
    example: OodScore  # one member, for the fingerprint
    members: Callable[[FitData], list[str]]  # the members every run with this fit data gets


class ScoreRegistry:
    """Registered scores in column order, and the families that make more of them by name."""

    def __init__(self) -> None:
        self._entries: dict[str, OodScore] = {}
        self._families: list[Family] = []

    def register(self, entry: OodScore) -> OodScore:
        if entry.name in self._entries:
            raise ValueError(f"OOD score {entry.name!r} is registered twice")
        self._entries[entry.name] = entry
        return entry

    def register_family(
        self,
        template: str,
        pattern: str,
        make: Callable[[re.Match[str]], OodScore],
        description: str,
        members: Callable[[FitData], list[str]] = lambda data: [],
    ) -> None:
        """Scores named by ``pattern`` (a regular expression), made by ``make``; ``template`` names them in docs,
        ``members`` says which of them every run gets (others only when asked for by name)."""
        compiled = re.compile(pattern)
        example = re.sub(r"\{(\w+)\}", lambda m: "NAME" if m.group(1) == "name" else "7", template)
        example_score = make(_match(compiled, example))
        self._families.append(Family(template, compiled, make, description, example_score, members))

    def unregister(self, name: str) -> None:
        """Remove ``name`` (for plug-ins and tests that register temporarily)."""
        self.get(name)
        del self._entries[name]

    def entries(self) -> list[OodScore]:
        """The registered scores, in column order."""
        return list(self._entries.values())

    def get(self, name: str) -> OodScore:
        """The entry ``name``, or the family member it names (``knn25``, ``uncertainty:neg_u``)."""
        if name in self._entries:
            return self._entries[name]
        for family in self._families:
            match = family.pattern.fullmatch(name)
            if match:
                return family.make(match)
        raise UnknownNameError(f"unknown OOD score {name!r}; valid: {', '.join(self.spellings())}")

    def __contains__(self, name: str) -> bool:
        return name in self._entries or any(f.pattern.fullmatch(name) for f in self._families)

    def spellings(self) -> list[str]:
        """Every registered name and each family's template (for help and error messages)."""
        return [*self._entries, *(f.template for f in self._families)]

    def available(self, data: FitData, extra: Iterable[str] = ()) -> dict[str, State]:
        """The state of every registered score, the families' members for ``data`` and the scores ``extra`` that
        apply to ``data``, in that order."""
        states: dict[str, State] = {}
        members = [name for family in self._families for name in family.members(data)]
        for name in dict.fromkeys([*self._entries, *members, *extra]):
            state = self.get(name).fit(data)
            if state is not None:
                states[name] = state
        return states

    def default_combination(self, available: Iterable[str], knn_k: int = COMBINATION_KNN_K) -> list[str]:
        """The default combination among ``available``: the entries marked ``in_default`` (a ``replaces`` entry
        when its score is missing), one member per family, the kNN distance on raw features at ``knn_k``
        neighbours (:func:`combination_knn`)."""
        names = list(available)
        chosen: list[str] = []
        families: set[str] = set()
        for name in names:
            entry = self.get(name)
            if not entry.in_default or (entry.replaces is not None and entry.replaces in names):
                continue
            if entry.family is not None:
                if entry.family in families:
                    continue
                families.add(entry.family)
                if entry.family == COMBINATION_KNN_FAMILY:
                    name = combination_knn(knn_k)
            chosen.append(name)
        return [n for n in chosen if n in names]

    def fingerprint(self, modules: Iterable[ModuleType] = ()) -> str:
        """A digest of every entry (name, kind, sidedness, the code of its fit and score) and of ``modules``'
        source: the cache key of fitted references changes by itself when a score or its fitting changes."""
        h = hashlib.sha256()
        for entry in [*self._entries.values(), *(f.example for f in self._families)]:
            h.update(repr((entry.name, entry.kind, entry.two_sided, entry.in_default, entry.replaces)).encode())
            h.update(_code(entry.fit) + _code(entry.score))
        for module in modules:
            h.update(inspect.getsource(module).encode())
        return h.hexdigest()[:16]

    def markdown_table(self) -> str:
        """The docs table: name, kind, direction, what it measures."""
        rows = ["| score | kind | direction | what it measures (higher = more OOD) |", "|---|---|---|---|"]
        named = [(e.name, e, e.description) for e in self._entries.values()]
        named += [(f.template, f.example, f.description) for f in self._families]
        for name, e, description in named:
            side = "two-sided" if e.two_sided else "higher = OOD"
            default = f" (default without `{e.replaces}`)" if e.replaces else " (default)" if e.in_default else ""
            rows.append(f"| `{name}` | {e.kind} | {side} | {description}{default} |")
        return "\n".join(rows)


def _match(pattern: re.Pattern[str], name: str) -> re.Match[str]:
    match = pattern.fullmatch(name)
    if match is None:
        raise ValueError(f"a family's template does not match its own pattern: {name!r}")
    return match


def _code(fn: Callable[..., Any]) -> bytes:
    """The source of ``fn`` (its bytecode and constants when the source is not available)."""
    try:
        return inspect.getsource(fn).encode()
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):  # no source file, or not Python (a docs page)
        code = fn.__code__
        return code.co_code + repr(code.co_consts).encode()


SCORES = ScoreRegistry()
