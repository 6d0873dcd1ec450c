"""VEM's feature-space bank samplers against plain loops of Alg. 1-2, Eq. 9 and App. D, vMF means and DDP."""

import math
import os
import statistics

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from probcl.samplers.feature_space import BankSampler, FeatureBank

# Hand-built case of the issue: M = 4 bank rows, N = 3 queries, k = 2 dimensions.
BANK = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.6, 0.8]]
QUERIES = [[0.8, 0.6], [0.0, -1.0], [-0.6, 0.8]]


def _normalize(row):
    norm = math.sqrt(sum(v * v for v in row))
    return [v / norm for v in row]


def _box_score(bank, queries, t):
    """Alg. 1 lines 9-11 with plain lists (softmax of L / t; line 11 with L = B q^T)."""
    n = len(queries)
    out = []
    for b in bank:
        logits = [sum(x * y for x, y in zip(b, q)) for q in queries]  # line 9
        top = max(logits)
        exp = [math.exp((logit - top) / t) for logit in logits]
        weights = [e / sum(exp) for e in exp]  # line 10
        radial = sum(w * logit for w, logit in zip(weights, logits)) / n  # mean(L_norm * L, dim=1)
        out.append([sum(w * q[d] for w, q in zip(weights, queries)) / n - radial * b[d] for d in range(len(b))])
    return out


def _box_langevin(bank, queries, t, alpha, eta, eps, noises):
    """Alg. 1 lines 8-15, B <- normalize(B + alpha/i dB + sqrt(2 alpha/i) eps Q_i)."""
    for i in range(1, eta + 1):
        score = _box_score(bank, queries, t)
        bank = [
            _normalize(
                [b[d] + alpha / i * s[d] + math.sqrt(2 * alpha / i) * eps * noises[i - 1][m][d] for d in range(len(b))]
            )
            for m, (b, s) in enumerate(zip(bank, score))
        ]
    return bank


def _box_svgd_linear(bank, queries, t, alpha, eta):
    """Alg. 2 lines 8-15: dB <- B B^T dB / M + B; B <- normalize(B + alpha/i dB)."""
    m_rows = len(bank)
    for i in range(1, eta + 1):
        score = _box_score(bank, queries, t)
        gram = [[sum(x * y for x, y in zip(a, b)) for b in bank] for a in bank]
        bank = [
            _normalize(
                [
                    bank[a][d]
                    + alpha / i * (sum(gram[a][j] * score[j][d] for j in range(m_rows)) / m_rows + bank[a][d])
                    for d in range(len(bank[a]))
                ]
            )
            for a in range(m_rows)
        ]
    return bank


def _box_svgd_rbf(bank, queries, t, alpha, eta):
    """Eq. 9 with k(x, y) = exp(-|x - y|^2 / h), h = median(|x_i - x_j|^2, i < j) / log M, score (N / t) dB."""
    m_rows, n = len(bank), len(queries)
    for i in range(1, eta + 1):
        score = [[v * n / t for v in s] for s in _box_score(bank, queries, t)]
        sq = [[sum((x - y) ** 2 for x, y in zip(a, b)) for b in bank] for a in bank]
        h = statistics.median(sq[a][b] for a in range(m_rows) for b in range(a + 1, m_rows)) / math.log(m_rows)
        new = []
        for a in range(m_rows):
            phi = [0.0] * len(bank[a])
            for j in range(m_rows):
                kern = math.exp(-sq[j][a] / h)
                for d in range(len(phi)):
                    # k(x_j, x_i) score_j + d/dx_j k(x_j, x_i) = ... + (2/h)(x_i - x_j) k
                    phi[d] += kern * score[j][d] + 2.0 / h * (bank[a][d] - bank[j][d]) * kern
            new.append(_normalize([bank[a][d] + alpha / i * phi[d] / m_rows for d in range(len(phi))]))
        bank = new
    return bank


def _tensor(rows):
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_langevin_update_matches_algorithm_1(temperature):
    eta, alpha, eps = 3, 0.8, 0.05
    generator = torch.Generator().manual_seed(7)
    noises = [torch.randn(4, 2, generator=generator, dtype=torch.float64).tolist() for _ in range(eta)]
    expected = _box_langevin(BANK, QUERIES, temperature, alpha, eta, eps, noises)
    sampler = BankSampler("langevin", temperature, eta, alpha, "decreasing", eps, update="literal")
    got, _ = sampler.run(_tensor(BANK), _tensor(QUERIES), torch.Generator().manual_seed(7))
    torch.testing.assert_close(got, _tensor(expected), rtol=1e-10, atol=1e-12)
    assert torch.allclose(got.norm(dim=1), torch.ones(4, dtype=torch.float64))


def test_langevin_without_noise_is_deterministic_and_matches_the_box():
    expected = _box_langevin(BANK, QUERIES, 0.5, 1.0, 4, 0.0, [[[0.0, 0.0]] * 4] * 4)
    sampler = BankSampler("langevin", 0.5, 4, 1.0, "decreasing", noise_scale=0.0, update="literal")
    first, _ = sampler.run(_tensor(BANK), _tensor(QUERIES), torch.Generator().manual_seed(1))
    second, _ = sampler.run(_tensor(BANK), _tensor(QUERIES), torch.Generator().manual_seed(2))
    assert torch.equal(first, second)
    torch.testing.assert_close(first, _tensor(expected), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_svgd_linear_update_matches_algorithm_2(temperature):
    expected = _box_svgd_linear(BANK, QUERIES, temperature, 1.0, 3)
    got, _ = BankSampler("svgd", temperature, 3, 1.0, "decreasing", kernel="linear", update="literal").run(
        _tensor(BANK), _tensor(QUERIES)
    )
    torch.testing.assert_close(got, _tensor(expected), rtol=1e-10, atol=1e-12)


def test_svgd_rbf_update_matches_eq_9():
    expected = _box_svgd_rbf(BANK, QUERIES, 0.5, 0.3, 3)
    got, _ = BankSampler("svgd", 0.5, 3, 0.3, "decreasing", kernel="rbf", update="literal").run(
        _tensor(BANK), _tensor(QUERIES)
    )
    torch.testing.assert_close(got, _tensor(expected), rtol=1e-10, atol=1e-12)


def test_fixed_schedule_uses_constant_step_and_noise():
    eta, alpha, eps = 2, 0.5, 0.03
    generator = torch.Generator().manual_seed(3)
    noises = [torch.randn(4, 2, generator=generator, dtype=torch.float64).tolist() for _ in range(eta)]
    bank = BANK
    for i in range(eta):  # Appendix I setting (2): B <- normalize(B + alpha dB + eps Q)
        score = _box_score(bank, QUERIES, 1.0)
        bank = [
            _normalize([b[d] + alpha * s[d] + eps * noises[i][m][d] for d in range(2)])
            for m, (b, s) in enumerate(zip(bank, score))
        ]
    got, _ = BankSampler("langevin", 1.0, eta, alpha, "fixed", eps, update="literal").run(
        _tensor(BANK), _tensor(QUERIES), torch.Generator().manual_seed(3)
    )
    torch.testing.assert_close(got, _tensor(bank), rtol=1e-10, atol=1e-12)


def test_noiseless_langevin_ascends_the_log_sum_exp_similarity():
    generator = torch.Generator().manual_seed(0)
    bank = F.normalize(torch.randn(64, 8, generator=generator), dim=1)
    queries = F.normalize(torch.randn(16, 8, generator=generator), dim=1)
    t = 0.1

    def objective(b):  # mean_m log sum_n exp(b_m . q_n / t), Eq. 11's log-density
        return torch.logsumexp(b @ queries.T / t, dim=1).mean().item()

    values = [
        objective(BankSampler("langevin", t, s, 1.0, noise_scale=0.0, update="literal").run(bank, queries)[0])
        for s in range(11)
    ]
    assert all(b > a for a, b in zip(values, values[1:])), values


def test_rbf_svgd_keeps_particles_apart_where_langevin_collapses():
    generator = torch.Generator().manual_seed(0)
    bank = F.normalize(torch.randn(16, 3, generator=generator), dim=1)
    centre = F.normalize(torch.ones(3), dim=0)
    queries = F.normalize(centre + 0.2 * torch.randn(4, 3, generator=generator), dim=1)

    def min_distance(b):
        d = torch.cdist(b, b)
        return d[~torch.eye(len(b), dtype=torch.bool)].min().item()

    langevin, _ = BankSampler("langevin", 0.1, 50, 1.0, "fixed", noise_scale=0.0, update="literal").run(bank, queries)
    svgd, _ = BankSampler("svgd", 0.1, 50, 1.0, "fixed", kernel="rbf", update="literal").run(bank, queries)
    assert (bank @ centre).mean() < 0.2
    assert (svgd @ centre).mean() > 0.7  # both move towards the data ...
    assert (langevin @ centre).mean() > 0.7
    assert min_distance(svgd) > 10 * min_distance(langevin)  # ... but only SVGD's particles stay apart


def test_bank_fills_from_first_batches_after_their_step():
    bank = FeatureBank(5, 2, BankSampler("langevin", 0.5, 1, 0.1, noise_scale=0.0))
    start = bank.bank.clone()
    q = F.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), dim=1)
    negatives = bank.update(q, seed=0).negatives
    expected, _ = BankSampler("langevin", 0.5, 1, 0.1, noise_scale=0.0).run(start, q)
    torch.testing.assert_close(negatives, expected)  # the step's own queries are not negatives
    torch.testing.assert_close(bank.bank[:3], q)  # then they initialise the first rows
    assert int(bank.filled) == 3
    bank.update(q, seed=1)
    assert int(bank.filled) == 5


def _ddp_worker(rank, world, init_file, queries, out_dir):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        bank = FeatureBank(6, 3, BankSampler("langevin", 0.2, 3, 0.5, noise_scale=0.05), seed=0)
        local = queries.chunk(world)[rank]
        for step in range(3):
            bank.update(local, seed=100 + step)
        torch.save(bank.bank.clone(), os.path.join(out_dir, f"bank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_bank_is_identical_across_two_ddp_ranks_and_equals_one_process(tmp_path):
    queries = F.normalize(torch.randn(4, 3, generator=torch.Generator().manual_seed(5)), dim=1)
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), queries, str(tmp_path)), nprocs=2, join=True)
    rank0, rank1 = torch.load(tmp_path / "bank0.pt"), torch.load(tmp_path / "bank1.pt")
    assert torch.equal(rank0, rank1)
    single = FeatureBank(6, 3, BankSampler("langevin", 0.2, 3, 0.5, noise_scale=0.05), seed=0)
    for step in range(3):
        single.update(queries, seed=100 + step)
    torch.testing.assert_close(rank0, single.bank)


def test_bank_optimizer_matches_appendix_d_with_momentum_and_gradient_over_t_and_a_tangent_velocity():
    t, alpha, m, eta = 0.5, 0.7, 0.9, 3
    bank, velocity = BANK, [[0.0, 0.0] for _ in BANK]
    for i in range(1, eta + 1):  # v <- m v + dB / t ; B <- normalize(B + alpha / i v) ; v <- v - (v . B) B
        score = _box_score(bank, QUERIES, t)
        velocity = [[m * v[d] + s[d] / t for d in range(2)] for v, s in zip(velocity, score)]
        bank = [_normalize([b[d] + alpha / i * v[d] for d in range(2)]) for b, v in zip(bank, velocity)]
        velocity = [[v[d] - sum(x * y for x, y in zip(v, b)) * b[d] for d in range(2)] for v, b in zip(velocity, bank)]
    sampler = BankSampler("langevin", t, eta, alpha, "decreasing", noise_scale=0.0, momentum=m)
    got, got_velocity = sampler.run(_tensor(BANK), _tensor(QUERIES))
    torch.testing.assert_close(got, _tensor(bank), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got_velocity, _tensor(velocity), rtol=1e-10, atol=1e-12)
    # the velocity carries over to the next training step: continuing from it differs from a fresh start
    resumed, _ = sampler.run(got, _tensor(QUERIES), velocity=got_velocity)
    fresh, _ = sampler.run(got, _tensor(QUERIES))
    assert not torch.allclose(resumed, fresh)


def _rotating_queries(step: int, n: int, generator: torch.Generator) -> torch.Tensor:
    """n unit queries around mu(step), which turns by 0.05 rad per step in the plane of e0 and e1."""
    mu = torch.zeros(16)
    mu[0], mu[1] = math.cos(0.05 * step), math.sin(0.05 * step)
    return F.normalize(mu + 0.15 * torch.randn(n, 16, generator=generator), dim=1)


def _track(method: str, update: str, kernel: str = "rbf") -> tuple[float, float]:
    """(cosine of the normalized bank mean with the queries' final mean direction, nearest-query cosine)
    after 60 steps of queries that turn by 0.05 rad a step (172 degrees in all); N = 256, t = 0.02."""
    generator = torch.Generator().manual_seed(0)
    feature_bank = FeatureBank(256, 16, BankSampler(method, 0.02, 10, 1.0, kernel=kernel, update=update), seed=0)
    feature_bank.bank.copy_(_rotating_queries(0, 256, generator))  # a bank that starts on the data
    feature_bank.filled.fill_(256)
    for step in range(60):
        result = feature_bank.update(_rotating_queries(step, 256, generator), seed=step)
    mu_end = torch.zeros(16)
    mu_end[0], mu_end[1] = math.cos(0.05 * 59), math.sin(0.05 * 59)
    return float(F.normalize(result.negatives.mean(0), dim=0) @ mu_end), float(result.nearest_query_cosine)


def test_the_bank_optimiser_tracks_moving_queries_where_the_literal_langevin_scale_stays_behind():
    optimizer, literal = _track("langevin", "optimizer"), _track("langevin", "literal")
    assert optimizer[0] > 0.95 and optimizer[1] > 0.8, optimizer
    assert literal[0] < 0.0 and literal[1] < 0.3, literal  # still near mu(0), opposite mu(59)
    svgd = _track("svgd", "optimizer")
    assert svgd[0] > 0.95 and svgd[1] > 0.8, svgd


def test_linear_kernel_svgd_is_degenerate_and_rbf_moves_and_spreads():
    """Alg. 2's linear kernel: its +B term is radial (removed by line 14) and B B^T dB moves every row in
    one shared direction, so rows keep their pairwise angles; RBF (Eq. 9) moves rows towards the
    queries while its repulsion keeps them apart."""
    generator = torch.Generator().manual_seed(1)
    bank = F.normalize(torch.randn(64, 8, generator=generator), dim=1)
    centre = F.normalize(torch.ones(8), dim=0)
    queries = F.normalize(centre + 0.1 * torch.randn(32, 8, generator=generator), dim=1)
    gram = bank @ bank.T
    linear, _ = BankSampler("svgd", 0.02, 10, 1.0, kernel="linear", update="literal").run(bank, queries)
    assert (linear @ linear.T - gram).abs().max() < 1e-2  # a near-rigid rotation: angles kept
    assert (linear * bank).sum(1).clamp(max=1).acos().mean() < 1e-2  # ... and a tiny one
    rbf, _ = BankSampler("svgd", 0.02, 10, 1.0).run(bank, queries)
    langevin, _ = BankSampler("langevin", 0.02, 10, 1.0, noise_scale=0.0).run(bank, queries)
    assert (rbf @ centre).mean() > (bank @ centre).mean() + 0.3  # towards high density ...
    off_diagonal = ~torch.eye(64, dtype=torch.bool)
    rbf_distances = torch.cdist(rbf, rbf)[off_diagonal]
    langevin_distances = torch.cdist(langevin, langevin)[off_diagonal]
    assert rbf_distances.min() > 2 * langevin_distances.min() and rbf_distances.mean() > 1.5 * langevin_distances.mean()


def test_bank_step_diagnostics_are_the_nearest_query_cosine_and_the_mean_angle_moved():
    bank = FeatureBank(3, 2, BankSampler("langevin", 0.5, 1, 0.4, noise_scale=0.0))
    bank.filled.fill_(3)
    before = bank.bank.clone()
    q = F.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), dim=1)
    step = bank.update(q, seed=0)
    angles = [math.acos(max(-1.0, min(1.0, float(a @ b)))) for a, b in zip(before, step.negatives)]
    nearest = [max(float(row @ qq) for qq in q) for row in step.negatives]
    assert float(step.displacement) == pytest.approx(sum(angles) / 3, abs=1e-6)
    assert float(step.nearest_query_cosine) == pytest.approx(sum(nearest) / 3, abs=1e-6)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_langevin_bank_samples_the_von_mises_fisher_density_of_one_query(momentum):
    """One query q and bank temperature t: p(z) = exp(z . q / t) is vMF(q, kappa = 1 / t), whose mean
    cosine in 3-d is coth(kappa) - 1 / kappa (0.800 at kappa 5). With momentum 0.9, noise added to the
    positions (the old update) gave 0.70-0.76, i.e. a differently tempered bank; SGHMC's velocity noise
    with a transported velocity samples p itself."""
    kappa, q = 5.0, torch.tensor([[0.0, 0.0, 1.0]])
    bank = FeatureBank(1000, 3, BankSampler("langevin", 1.0 / kappa, 1, 0.001, momentum=momentum), seed=0)
    bank.filled.fill_(1000)
    for step in range(2500):
        bank.update(q, seed=step)
    mean_cosine = float((bank.bank @ q.T).mean())
    assert mean_cosine == pytest.approx(1.0 / math.tanh(kappa) - 1.0 / kappa, abs=0.015)


def test_rows_filled_from_queries_start_without_the_old_particles_momentum():
    bank = FeatureBank(6, 2, BankSampler("langevin", 0.5, 1, 0.1, noise_scale=0.0), seed=0)
    bank.filled.fill_(2)
    bank.velocity.fill_(1.0)
    bank.update(F.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), dim=1), seed=0)
    assert int(bank.filled) == 5
    assert bank.velocity[2:5].abs().max() == 0.0  # the three new rows
    assert bank.velocity[:2].abs().min() > 0.0 and bank.velocity[5].abs().min() > 0.0  # the others kept theirs


def test_median_bandwidth_of_a_large_bank_is_within_a_percent_of_the_exact_median():
    import numpy as np

    from probcl.samplers.feature_space import median_bandwidth, squared_distances

    bank = F.normalize(torch.randn(3000, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64), dim=1)
    bank[:1500] = F.normalize(bank[:1500] + 2.0, dim=1)  # two unequal clusters: a skewed distance distribution
    sq = squared_distances(bank)
    exact = np.median(sq.numpy()[np.triu_indices(3000, k=1)]) / math.log(3000)
    assert median_bandwidth(sq) == pytest.approx(exact, rel=0.01)
    small = sq[:500, :500]  # below the subset size the median is exact
    assert median_bandwidth(small) == pytest.approx(np.median(small.numpy()[np.triu_indices(500, k=1)]) / math.log(500))
    torch.testing.assert_close(sq, torch.cdist(bank, bank).pow(2), atol=1e-10, rtol=0)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_the_preset_schedule_samples_p_only_without_momentum(momentum):
    """The presets' schedule: 10 steps of alpha / i per training step, at the full bank lr and at lr x 0.1, on
    128 identical 64-d queries at t = 0.02: p(z) = vMF(kappa = 50), mean cosine I_32(50) / I_31(50) = 0.549
    (scipy). Momentum 0 (VEM-Langevin's preset) stays within 0.03 at both lrs; momentum 0.9 does not."""
    from scipy.special import ive

    target = ive(32, 50.0) / ive(31, 50.0)
    q = torch.zeros(128, 64)
    q[:, 0] = 1.0
    errors = []
    for lr_scale in (1.0, 0.1):
        bank = FeatureBank(400, 64, BankSampler("langevin", 0.02, 10, 1.0, momentum=momentum), seed=0)
        bank.filled.fill_(400)
        noise = torch.randn(400, 64, generator=torch.Generator().manual_seed(1))
        bank.bank.copy_(F.normalize(q[:1] + 0.3 * noise, dim=1))
        for step in range(120):
            bank.update(q, seed=step, lr_scale=lr_scale)
        errors.append(abs(float((bank.bank @ q[0]).mean()) - target))
    if momentum == 0.0:
        assert max(errors) < 0.03, errors
    else:
        assert max(errors) > 0.08, errors


def test_pre_update_order_gives_the_loss_the_bank_before_it_moves_towards_this_batch():
    """AdCo's order: step 1's negatives are the bank as it was (BANK, by hand); step 2's are what step 1's
    Alg. 1 box made of it; the default order returns each step's own update (the box's result)."""
    sampler = BankSampler("langevin", 0.5, 1, 0.3, noise_scale=0.0, update="literal")
    queries = _tensor(QUERIES)
    moved_once = _box_langevin(BANK, QUERIES, 0.5, 0.3, 1, 0.0, [[[0.0, 0.0]] * 4])
    moved_twice = _box_langevin(moved_once, QUERIES, 0.5, 0.3, 1, 0.0, [[[0.0, 0.0]] * 4])

    def bank_of_rows(rows):
        bank = FeatureBank(4, 2, sampler).double()
        bank.bank.copy_(_tensor(rows))
        bank.filled.fill_(4)
        return bank

    pre = bank_of_rows(BANK)
    first, second = (pre.update(queries, seed=s, pre_update=True) for s in (0, 1))
    torch.testing.assert_close(first.negatives, _tensor(BANK), rtol=0, atol=0)
    torch.testing.assert_close(second.negatives, _tensor(moved_once), rtol=0, atol=1e-12)
    torch.testing.assert_close(pre.bank, _tensor(moved_twice), rtol=0, atol=1e-12)
    nearest = sum(max(sum(a * b for a, b in zip(row, q)) for q in QUERIES) for row in BANK) / 4
    assert float(first.nearest_query_cosine) == pytest.approx(nearest, abs=1e-12)  # hardness of what the loss sees
    updated = bank_of_rows(BANK).update(queries, seed=0)
    torch.testing.assert_close(updated.negatives, _tensor(moved_once), rtol=0, atol=1e-12)


def test_fill_counter_fills_in_order_and_rereads_the_count_after_a_load():
    """Rows go into the first unfilled entries until the bank is full; the host-side count follows a loaded
    checkpoint's (a bank saved half full and loaded into a fresh one continues where the saved one stopped)."""
    bank = FeatureBank(size=10, dim=3, sampler=BankSampler(steps=1), seed=0)
    first, second = torch.ones(4, 3), 2 * torch.ones(4, 3)
    assert bank.fill.fill_(bank.bank, bank.filled, first) == range(0, 4)
    assert bank.fill.fill_(bank.bank, bank.filled, second) == range(4, 8)
    assert int(bank.filled) == 8 and torch.equal(bank.bank[4:8], second)
    saved = {k: v.clone() for k, v in bank.state_dict().items()}
    assert bank.fill.fill_(bank.bank, bank.filled, 3 * torch.ones(4, 3)) == range(8, 10)  # only 2 rows left
    assert bank.fill.fill_(bank.bank, bank.filled, first) == range(10, 10)  # full: nothing changes
    bank.load_state_dict(saved)  # back to 8 filled rows
    assert bank.fill.fill_(bank.bank, bank.filled, 4 * torch.ones(4, 3)) == range(8, 10)
    fresh = FeatureBank(size=10, dim=3, sampler=BankSampler(steps=1), seed=1)
    fresh.load_state_dict(saved)
    assert fresh.fill.fill_(fresh.bank, fresh.filled, 5 * torch.ones(1, 3)) == range(8, 9)
    assert torch.equal(fresh.bank[8], 5 * torch.ones(3)) and int(fresh.filled) == 9
