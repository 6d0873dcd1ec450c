"""VEM: feature-space bank updates against a plain loop of the algorithm boxes, sampler properties,
bank consistency under 2-process DDP (gloo), and a tiny pretraining run of every variant.

Training imports stay inside the tests that train: the DDP workers re-import this module.
"""
import math
import os
import statistics

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from probcl.config import ConfigError
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
        exp = [math.exp((l - top) / t) for l in logits]
        weights = [e / sum(exp) for e in exp]  # line 10
        radial = sum(w * l for w, l in zip(weights, logits)) / n  # mean(L_norm * L, dim=1)
        out.append([sum(w * q[d] for w, q in zip(weights, queries)) / n - radial * b[d] for d in range(len(b))])
    return out


def _box_langevin(bank, queries, t, alpha, eta, eps, noises):
    """Alg. 1 lines 8-15, B <- normalize(B + alpha/i dB + sqrt(2 alpha/i) eps Q_i)."""
    for i in range(1, eta + 1):
        score = _box_score(bank, queries, t)
        bank = [_normalize([b[d] + alpha / i * s[d] + math.sqrt(2 * alpha / i) * eps * noises[i - 1][m][d]
                            for d in range(len(b))])
                for m, (b, s) in enumerate(zip(bank, score))]
    return bank


def _box_svgd_linear(bank, queries, t, alpha, eta):
    """Alg. 2 lines 8-15: dB <- B B^T dB / M + B; B <- normalize(B + alpha/i dB)."""
    m_rows = len(bank)
    for i in range(1, eta + 1):
        score = _box_score(bank, queries, t)
        gram = [[sum(x * y for x, y in zip(a, b)) for b in bank] for a in bank]
        bank = [_normalize([bank[a][d] + alpha / i * (sum(gram[a][j] * score[j][d] for j in range(m_rows)) / m_rows
                                                     + bank[a][d])
                            for d in range(len(bank[a]))])
                for a in range(m_rows)]
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
    sampler = BankSampler("langevin", temperature, eta, alpha, "decreasing", eps)
    got = sampler.run(_tensor(BANK), _tensor(QUERIES), torch.Generator().manual_seed(7))
    torch.testing.assert_close(got, _tensor(expected), rtol=1e-10, atol=1e-12)
    assert torch.allclose(got.norm(dim=1), torch.ones(4, dtype=torch.float64))


def test_langevin_without_noise_is_deterministic_and_matches_the_box():
    expected = _box_langevin(BANK, QUERIES, 0.5, 1.0, 4, 0.0, [[[0.0, 0.0]] * 4] * 4)
    sampler = BankSampler("langevin", 0.5, 4, 1.0, "decreasing", noise_scale=0.0)
    first = sampler.run(_tensor(BANK), _tensor(QUERIES), torch.Generator().manual_seed(1))
    second = sampler.run(_tensor(BANK), _tensor(QUERIES), torch.Generator().manual_seed(2))
    assert torch.equal(first, second)
    torch.testing.assert_close(first, _tensor(expected), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_svgd_linear_update_matches_algorithm_2(temperature):
    expected = _box_svgd_linear(BANK, QUERIES, temperature, 1.0, 3)
    got = BankSampler("svgd", temperature, 3, 1.0, "decreasing").run(_tensor(BANK), _tensor(QUERIES))
    torch.testing.assert_close(got, _tensor(expected), rtol=1e-10, atol=1e-12)


def test_svgd_rbf_update_matches_eq_9():
    expected = _box_svgd_rbf(BANK, QUERIES, 0.5, 0.3, 3)
    got = BankSampler("svgd", 0.5, 3, 0.3, "decreasing", kernel="rbf").run(_tensor(BANK), _tensor(QUERIES))
    torch.testing.assert_close(got, _tensor(expected), rtol=1e-10, atol=1e-12)


def test_fixed_schedule_uses_constant_step_and_noise():
    eta, alpha, eps = 2, 0.5, 0.03
    generator = torch.Generator().manual_seed(3)
    noises = [torch.randn(4, 2, generator=generator, dtype=torch.float64).tolist() for _ in range(eta)]
    bank = BANK
    for i in range(eta):  # Appendix I setting (2): B <- normalize(B + alpha dB + eps Q)
        score = _box_score(bank, QUERIES, 1.0)
        bank = [_normalize([b[d] + alpha * s[d] + eps * noises[i][m][d] for d in range(2)])
                for m, (b, s) in enumerate(zip(bank, score))]
    got = BankSampler("langevin", 1.0, eta, alpha, "fixed", eps).run(_tensor(BANK), _tensor(QUERIES),
                                                                     torch.Generator().manual_seed(3))
    torch.testing.assert_close(got, _tensor(bank), rtol=1e-10, atol=1e-12)


def test_noiseless_langevin_ascends_the_log_sum_exp_similarity():
    generator = torch.Generator().manual_seed(0)
    bank = F.normalize(torch.randn(64, 8, generator=generator), dim=1)
    queries = F.normalize(torch.randn(16, 8, generator=generator), dim=1)
    t = 0.1

    def objective(b):  # mean_m log sum_n exp(b_m . q_n / t), Eq. 11's log-density
        return torch.logsumexp(b @ queries.T / t, dim=1).mean().item()

    values = [objective(BankSampler("langevin", t, s, 1.0, noise_scale=0.0).run(bank, queries))
              for s in range(11)]
    assert all(b > a for a, b in zip(values, values[1:])), values


def test_rbf_svgd_keeps_particles_apart_where_langevin_collapses():
    generator = torch.Generator().manual_seed(0)
    bank = F.normalize(torch.randn(16, 3, generator=generator), dim=1)
    centre = F.normalize(torch.ones(3), dim=0)
    queries = F.normalize(centre + 0.2 * torch.randn(4, 3, generator=generator), dim=1)

    def min_distance(b):
        d = torch.cdist(b, b)
        return d[~torch.eye(len(b), dtype=torch.bool)].min().item()

    langevin = BankSampler("langevin", 0.1, 50, 1.0, "fixed", noise_scale=0.0).run(bank, queries)
    svgd = BankSampler("svgd", 0.1, 50, 1.0, "fixed", kernel="rbf").run(bank, queries)
    assert (bank @ centre).mean() < 0.2
    assert (svgd @ centre).mean() > 0.7  # both move towards the data ...
    assert (langevin @ centre).mean() > 0.7
    assert min_distance(svgd) > 10 * min_distance(langevin)  # ... but only SVGD's particles stay apart


def test_bank_fills_from_first_batches_after_their_step():
    bank = FeatureBank(5, 2, BankSampler("langevin", 0.5, 1, 0.1, noise_scale=0.0))
    start = bank.bank.clone()
    q = F.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), dim=1)
    negatives = bank.update(q, seed=0)
    expected = BankSampler("langevin", 0.5, 1, 0.1, noise_scale=0.0).run(start, q)
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


@pytest.mark.parametrize("method,args", [
    ("vem-langevin", {"base": "simclr"}),
    ("vem-langevin", {"base": "moco"}),
    ("vem-svgd", {"base": "simclr"}),
    ("vem-svgd", {"base": "simclr", "kernel": "rbf"}),
    ("vem-image", {"base": "simclr", "particles": 8, "steps": 2}),
    ("vem-image", {"base": "moco", "particles": 8, "steps": 2}),
])
def test_tiny_pretraining_writes_a_loadable_checkpoint(tiny_config, method, args):
    import probcl
    from probcl.core.runs import RunPaths
    from probcl.tasks.pretrain import pretrain

    bank_args = {} if method == "vem-image" else {"bank_size": 48}
    cfg = tiny_config(method, run_name=f"{method}-{len(args)}-{args['base']}",
                      **{"method_args": {**args, **bank_args}, "train.limit_train_batches": 2,
                         "train.monitor_every_n_epochs": 0})
    root = pretrain(cfg)
    assert RunPaths(root).last.exists()
    model = probcl.load(root)
    state = model.state_dict()
    if method == "vem-image":
        assert int(state["image_bank.filled"]) == 8 and state["image_bank.particles"].shape == (8, 1, 28, 28)
    else:
        assert int(state["memory.filled"]) == 48  # 2 steps x 32 queries, capped at the bank size
        assert torch.allclose(state["memory.bank"].norm(dim=1), torch.ones(48))
    assert ("key_encoder.backbone.features.0.weight" in state) == (args["base"] == "moco")
    images = torch.randint(0, 256, (3, 1, 28, 28), dtype=torch.uint8)
    assert model.embed(images).shape == (3, model.feature_dim)


@pytest.mark.parametrize("args,key", [
    ({"bank_temperature": 0.0}, "bank_temperature"),
    ({"base": "byol"}, "base"),
    ({"kernel": "gaussian"}, "kernel"),
    ({"bank_size": 0}, "bank_size"),
])
def test_invalid_hyper_parameters_name_the_key(tiny_config, args, key):
    from probcl.tasks.pretrain import pretrain

    cfg = tiny_config("vem-svgd", **{"method_args": args})
    with pytest.raises(ConfigError, match=key):
        pretrain(cfg)
