"""VEM's feature-space negative samplers: a memory bank moved by Langevin or SVGD (VEM Appendix C).

The bank B (M x k, unit rows) holds particles z of the model's feature density

    p(z) proportional to sum_n exp(z . q_n / t)      (VEM Eq. 10-11, with exp: the log-sum-exp of Eq. 7)

estimated from the batch's normalized queries q_1..q_N at the bank temperature t. Each
training step moves the bank by eta steps, i = 1..eta, without any forward or backward
pass through the encoder:

    L = B q^T, L_norm = softmax(L / t, dim=1)                                   (Alg. 1 lines 9-10)
    Delta B = L_norm q / N - mean(L_norm * L, dim=1)^T * B                     (line 11)
    Langevin: B <- normalize(B + alpha_i Delta B + sigma_i Q), Q ~ N(0, 1)      (lines 12-14)
    SVGD, linear kernel: B <- normalize(B + alpha_i (B B^T Delta B / M + B))    (Alg. 2 lines 12-14)
    SVGD, RBF kernel (Eq. 9): B_i <- normalize(B_i + alpha_i / M sum_j
                              [k(B_j, B_i) (N / t) Delta B_j + grad_{B_j} k(B_j, B_i)])

Where the bank temperature enters: the boxes print L = B q^T without one; Appendix D
updates the bank at t = 0.02. We divide by t inside the softmax only, so that line 11 stays
the tangent-space (Riemannian) gradient of Eq. 11 on the unit sphere, (t / N) (I - b b^T)
grad_b log p(b). Dividing line 11's L by t as well would only rescale the radial term, which
line 14's normalisation turns into a step-size change that flips sign once alpha (b . L_norm q)
exceeds N t. With t = 1 this is the printed box exactly. The RBF kernel's repulsion is only
balanced against the true score, so Eq. 9 is driven by (N / t) Delta B = grad log p (tangent
part); with the linear kernel the repulsive term B is radial and line 14 cancels it.

Step sizes (Appendix I): ``decreasing`` gives alpha_i = alpha / i and sigma_i =
sqrt(2 alpha / i) eps (Alg. 1 line 13, settings (1)/(5)); ``fixed`` gives alpha_i = alpha and
sigma_i = eps (settings (2)/(6): alpha 1, eps 0.03). ``noise_scale=None`` sets
eps = sqrt(t / N): a decreasing-schedule step is then an unadjusted Langevin step of size
alpha_i t / N on p(z) itself, since line 11 is (t / N) times its score. (eps = 1, line 13 as
printed, would add noise of norm ~sqrt(2k) to unit rows and leave the bank uniform on the sphere.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from probcl.runtime.distributed import gather_no_grad

Schedule = Literal["decreasing", "fixed"]


def langevin_schedule(
    steps: int, step_size: float, noise_scale: float, schedule: Schedule = "decreasing"
) -> list[tuple[float, float]]:
    """(alpha_i, sigma_i) for i = 1..steps: step size and noise standard deviation of step i."""
    if schedule == "fixed":
        return [(step_size, noise_scale)] * steps
    return [(step_size / i, math.sqrt(2.0 * step_size / i) * noise_scale) for i in range(1, steps + 1)]


def bank_score(bank: torch.Tensor, queries: torch.Tensor, temperature: float) -> torch.Tensor:
    """Delta B of Alg. 1 lines 9-11: (M, k) ascent direction of log p on the sphere at each bank row."""
    logits = bank @ queries.T  # L, (M, N)
    weights = torch.softmax(logits / temperature, dim=1)  # L_norm
    n = queries.shape[0]
    return weights @ queries / n - (weights * logits).mean(dim=1, keepdim=True) * bank


def svgd_linear_direction(bank: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """Alg. 2 line 12, SVGD with k(x, y) = x^T y: B B^T Delta B / M + B."""
    return bank @ (bank.T @ score) / bank.shape[0] + bank


MEDIAN_ROWS = 1024  # rows whose pairwise distances give the median heuristic (all of them up to this size)


def median_bandwidth(sq_distances: torch.Tensor, max_rows: int = MEDIAN_ROWS) -> torch.Tensor:
    """Liu & Wang's median heuristic h = med^2 / log M from the (M, M) squared pairwise distances, as a
    0-d tensor on their device (no host read: SVGD runs it at every iteration of every training step).

    The median is taken over the pairs among ``max_rows`` evenly strided rows: exact for M <= max_rows,
    and for a 4096-row bank an estimate from 523k of its 8.4M pairs (relative error ~0.1 %, tested) that
    costs ~1/16 of sorting them all at every sampler step.
    """
    m = sq_distances.shape[0]
    if m > max_rows:
        rows = torch.linspace(0, m - 1, max_rows, device=sq_distances.device).long()
        sq_distances = sq_distances[rows][:, rows]
    k = sq_distances.shape[0]
    pairs = sq_distances[torch.triu_indices(k, k, offset=1, device=sq_distances.device).unbind()]
    n = pairs.numel()
    median = 0.5 * (pairs.kthvalue((n + 1) // 2).values + pairs.kthvalue(n // 2 + 1).values)  # as numpy's
    return (median / math.log(max(m, 2))).clamp_min(1e-8)


def squared_distances(x: torch.Tensor) -> torch.Tensor:
    """(M, M) squared Euclidean distances from the Gram matrix (one matmul; cdist is ~2x slower on CPU)."""
    norms = x.pow(2).sum(dim=1)
    return (norms[:, None] + norms[None, :] - 2.0 * x @ x.T).clamp_min_(0.0)


def svgd_rbf_direction(
    bank: torch.Tensor, score: torch.Tensor, bandwidth: float | torch.Tensor | None = None
) -> torch.Tensor:
    """Eq. 9 with k(x, y) = exp(-||x - y||^2 / h): (1/M) sum_j [k_ji score_j + grad_{x_j} k(x_j, x_i)].

    ``bandwidth`` h defaults to the median heuristic. The repulsive term is
    sum_j (2 / h) (x_i - x_j) k_ij.
    """
    sq = squared_distances(bank)
    h = median_bandwidth(sq) if bandwidth is None else bandwidth
    kernel = torch.exp(-sq / h)  # symmetric (M, M)
    attraction = kernel @ score
    repulsion = (2.0 / h) * (kernel.sum(dim=1, keepdim=True) * bank - kernel @ bank)
    return (attraction + repulsion) / bank.shape[0]


def _tangent(vectors: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """The component of each row of ``vectors`` in the tangent plane of the unit sphere at ``points``."""
    return vectors - (vectors * points).sum(dim=1, keepdim=True) * points


BankUpdate = Literal["optimizer", "literal"]


@dataclass(frozen=True)
class BankSampler:
    """Settings of one bank update (VEM Appendix C, D and I).

    ``update="optimizer"`` (default) is the bank update of Appendix D: the bank is trained like a
    parameter with its own learning rate alpha (1.0 or 0.5) and momentum 0.9, as in AdCo (whose
    bank VEM inherits), on the mean-over-queries objective with the gradient divided by t:

        g = Delta B / t = (1 / N) grad log p (tangent part),   v <- m v + g,   B <- normalize(B + alpha_i v + sigma_i Q)

    The velocity v persists across training steps (it is part of the bank's state).
    For SVGD with the RBF kernel the gradient is Eq. 9's phi (built from grad log p) in both modes.
    ``update="literal"`` is Alg. 1 line 13 as printed, B <- normalize(B + alpha_i Delta B + sigma_i Q),
    whose drift is (t / N) grad log p: at N = 256, t = 0.02 a row moves at most ~2.9 alpha / N rad
    per training step, so the bank barely leaves its initial features.

    Langevin noise defaults to eps = sqrt(drift scale): sqrt(1 / N) (optimizer) or sqrt(t / N)
    (literal), i.e. an unadjusted Langevin step of p(z) with step alpha_i / N (alpha_i t / N).
    With the optimiser's momentum m the Langevin update is SGHMC on the sphere (Chen et al. 2014):

        v <- m v + g + (sqrt(1 - m) sigma_i / alpha_i) xi,   B <- normalize(B + alpha_i v),   v <- (I - B B^T) v

    with xi ~ N(0, I) projected on the tangent plane. The momentum's steady-state step is
    alpha_i / (1 - m), and this noise is what that step needs for the bank to sample p(z) itself;
    keeping v tangent (its vector transport) stops radial momentum from silently shrinking the steps.
    Noise added to B instead (as before) samples a ~10x colder density at m = 0.9 and the bank ends
    narrower than the queries; both are checked against a von Mises-Fisher target in the tests.
    At m = 0 this is the plain Langevin step above with tangent noise of standard deviation sigma_i.
    The SGHMC form is calibrated for a constant step size only: with the ``decreasing`` alpha / i steps that
    restart every training step (and a bank lr that follows the backbone's schedule) the velocity carries
    noise sized for one step into another, and the bank's temperature drifts with the schedule (tested:
    too cold at full lr, too warm at lr x 0.1). VEM-Langevin's presets therefore use momentum 0.
    """

    method: Literal["langevin", "svgd"] = "langevin"
    temperature: float = 0.02  # t of the bank's softmax (Appendix D)
    steps: int = 10  # eta
    step_size: float = 1.0  # alpha, the bank learning rate (Appendix D: 1.0 or 0.5)
    schedule: Schedule = "decreasing"
    noise_scale: float | None = None  # eps (Langevin only); None = sqrt of the drift scale (see above)
    kernel: Literal["linear", "rbf"] = "rbf"  # SVGD kernel: RBF (Eq. 9); linear (Alg. 2) is degenerate
    bandwidth: float | None = None  # RBF h; None = median heuristic
    update: BankUpdate = "optimizer"  # Appendix D's bank optimiser, or Alg. 1 line 13 literally
    momentum: float = 0.9  # the bank optimiser's momentum (Appendix D)

    def drift_scale(self, batch: int) -> float:
        """The factor c of the Langevin drift c * grad log p: 1 / N (optimizer) or t / N (literal)."""
        return (1.0 if self.update == "optimizer" else self.temperature) / batch

    def direction(self, bank: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """The ascent direction of one step (the bank optimiser's gradient, or the literal box's step)."""
        n = queries.shape[0]
        score = bank_score(bank, queries, self.temperature)  # line 11: (t / N) grad log p, tangent part
        if self.method == "svgd" and self.kernel == "rbf":
            # Eq. 9: the repulsion is balanced against grad log p itself, so phi is built from it.
            return svgd_rbf_direction(bank, score * (n / self.temperature), self.bandwidth)
        if self.update == "optimizer":
            score = score / self.temperature  # AdCo: the gradient of the mean over queries, divided by t
        return score if self.method == "langevin" else svgd_linear_direction(bank, score)  # Alg. 2 line 12

    @torch.no_grad()
    def run(
        self,
        bank: torch.Tensor,
        queries: torch.Tensor,
        generator: torch.Generator | None = None,
        velocity: torch.Tensor | None = None,
        lr_scale: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(bank, velocity) after ``steps`` updates towards the normalized ``queries`` (N, k); inputs untouched.

        ``velocity`` is the optimiser's momentum buffer (zeros when None; unused by ``literal``);
        ``lr_scale`` multiplies alpha (e.g. the backbone's cosine schedule factor).
        """
        eps = math.sqrt(self.drift_scale(queries.shape[0])) if self.noise_scale is None else self.noise_scale
        velocity = torch.zeros_like(bank) if velocity is None else velocity
        for alpha, sigma in langevin_schedule(self.steps, self.step_size * lr_scale, eps, self.schedule):
            step = self.direction(bank, queries)
            noise = (
                torch.randn(bank.shape, generator=generator, device=bank.device, dtype=bank.dtype)
                if self.method == "langevin"
                else None
            )
            if self.update == "literal":
                bank = bank + alpha * step  # Alg. 1 line 13 / Alg. 2 line 13
                bank = F.normalize(bank if noise is None else bank + sigma * noise, dim=1)  # line 14
                continue
            if noise is not None and alpha > 0.0:  # SGHMC: the velocity carries its steady-state step's noise
                step = step + (math.sqrt(1.0 - self.momentum) * sigma / alpha) * _tangent(noise, bank)
            velocity = self.momentum * velocity + step
            bank = F.normalize(bank + alpha * velocity, dim=1)  # line 14
            velocity = _tangent(velocity, bank)  # vector transport to the new tangent plane
        return bank, velocity


@dataclass
class BankStep:
    """One training step's bank update: the negatives and two diagnostics for ``metrics.jsonl``."""

    negatives: torch.Tensor  # (M, k) the bank the loss sees: sampled this step, or as the last step left it
    # bank hardness: mean over the negatives' rows of the cosine to the nearest query of this step (all ranks);
    # a frozen bank drifts low, a bank colder than p(z) sits close to the queries
    nearest_query_cosine: torch.Tensor
    displacement: torch.Tensor  # mean angle (rad) each row moved in this step


class FillCounter:
    """How many rows of a bank hold real features: the bank's ``filled`` buffer (checkpointed, on the bank's
    device) mirrored by a host-side count, so that filling reads the device once per run (at the first fill
    after a start or a checkpoint load), not at every training step. The buffer is passed in at each call
    (``Module.to`` replaces buffers, so it is never kept here)."""

    def __init__(self) -> None:
        self._host: int | None = None

    def forget(self) -> None:
        """The buffer was overwritten (a checkpoint was loaded): read it again at the next fill."""
        self._host = None

    @torch.no_grad()
    def fill_(self, storage: torch.Tensor, filled: torch.Tensor, rows: torch.Tensor) -> range:
        """Copy ``rows`` into the first unfilled entries of ``storage``, advance ``filled`` and return the
        indices written. Once ``storage`` is full this does nothing: banks are initialised from the first
        batches."""
        if self._host is None:
            self._host = int(filled)  # the one read of the device
        start = self._host
        if start >= storage.shape[0]:
            return range(start, start)
        rows = rows[: storage.shape[0] - start]
        storage[start : start + rows.shape[0]] = rows.to(storage.dtype)
        self._host = start + rows.shape[0]
        filled.fill_(self._host)
        return range(start, self._host)


class FeatureBank(nn.Module):
    """The persistent memory bank of VEM-Langevin / VEM-SVGD, identical on every DDP rank.

    Rows start as random unit vectors and are overwritten, in order, by the normalized
    queries of the first training steps (after their own step has used the bank) until all
    M rows hold real features; from then on the bank changes only through the sampler, each
    step's chains starting where the last step's ended. Every rank updates from the
    all-gathered queries and draws its noise from a generator seeded by the same per-step
    seed, so all ranks compute the same bank. The bank optimiser's velocity is a buffer too,
    so checkpoints resume it.
    """

    bank: torch.Tensor
    filled: torch.Tensor
    velocity: torch.Tensor

    def __init__(self, size: int, dim: int, sampler: BankSampler, seed: int = 0) -> None:
        super().__init__()
        self.sampler = sampler
        init = torch.Generator().manual_seed(seed)
        self.register_buffer("bank", F.normalize(torch.randn(size, dim, generator=init), dim=1))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        self.register_buffer("velocity", torch.zeros(size, dim))
        self.fill = FillCounter()

    @property
    def size(self) -> int:
        return self.bank.shape[0]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Checkpoints written before the bank optimiser existed have no velocity: start it at zero."""
        state_dict.setdefault(prefix + "velocity", torch.zeros_like(self.velocity))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.fill.forget()

    @torch.no_grad()
    def update(self, queries: torch.Tensor, seed: int, lr_scale: float = 1.0, pre_update: bool = False) -> BankStep:
        """Sample towards this step's queries of all ranks and return the sampled bank (M, k) with its
        diagnostics; then write the queries into still-unfilled rows, for the next steps (a query is
        never its own negative). With ``pre_update`` (AdCo's order) the returned negatives are the bank
        as it was before this step's sampling, which has not seen this step's queries.

        ``queries`` are this rank's normalized, detached features; ``seed`` must be equal on
        all ranks and differ between steps (e.g. derived from the global step).
        """
        with torch.autocast(self.bank.device.type, enabled=False):
            queries = gather_no_grad(queries.detach().contiguous()).to(self.bank.dtype)
            generator = torch.Generator(device=self.bank.device).manual_seed(seed)
            before = self.bank.clone()
            sampled, velocity = self.sampler.run(self.bank, queries, generator, self.velocity, lr_scale)
            self.bank.copy_(sampled)
            self.velocity.copy_(velocity)
            written = self.fill.fill_(self.bank, self.filled, queries)
            self.velocity[written.start : written.stop] = 0.0  # a new row does not inherit the old particle's momentum
            negatives = before if pre_update else sampled
            nearest = (negatives @ queries.T).amax(dim=1).mean()
            moved = (sampled * before).sum(dim=1).clamp(-1.0, 1.0).acos().mean()
        return BankStep(negatives, nearest, moved)
