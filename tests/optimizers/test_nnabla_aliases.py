"""nnabla's solvers: every alias against a NumPy transcription of the CPU rule in the reference
sheet (§1), over 100 steps on mixed pytrees, with learning-rate schedules; the solvers that an
existing alias already covers are proven equal to it with the documented settings."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.optimizers import _bound, _eve

from ..helpers import compare_to_numpy, grad_sequence, mixed_params
from ..transforms.test_bounded import bound_reference

LR = lambda count: 0.02 / (1.0 + 0.01 * count)


class Solver:
    """A NumPy nnabla solver: per-parameter state in dicts, t counted before use (t = 1 first).

    `lr` is a float or a schedule of the 0-based step; eta0 is its value at step 0.
    """

    def __init__(self, lr):
        self.lr, self.t, self.state = lr, 0, {}

    def eta(self) -> float:
        return self.lr(self.t - 1) if callable(self.lr) else self.lr

    def eta0(self) -> float:
        return self.lr(0) if callable(self.lr) else self.lr

    def slot(self, name, i, like, value=0.0):
        return self.state.get((name, i), np.full_like(like, value))

    def __call__(self, grads, params):
        self.t += 1
        out = []
        for i, (g, w) in enumerate(zip(grads, params, strict=True)):
            out.append(self.rule(i, g, w))
        return out

    def set(self, name, i, value):
        self.state[(name, i)] = value


def solver(rule, lr, **hp):
    """`make_ref` from `rule(solver, i, g, w, **hp) -> delta w`."""

    def make():
        s = Solver(lr)
        s.rule = lambda i, g, w: rule(s, i, g, w, **hp)
        return s

    return make


def norm(x):
    return float(np.sqrt(np.sum(x * x)))


def sgd_rule(s, i, g, w):
    return -s.eta() * g


def momentum_rule(s, i, g, w, momentum):
    m = momentum * s.slot("m", i, g) + s.eta() * g
    s.set("m", i, m)
    return -m


def nesterov_rule(s, i, g, w, momentum):
    m = s.slot("m", i, g)
    m_new = momentum * m - s.eta() * g
    s.set("m", i, m_new)
    return -momentum * m + (1 + momentum) * m_new


def sgdw_rule(s, i, g, w, momentum, wd):
    m = momentum * s.slot("m", i, g) + s.eta() * g
    s.set("m", i, m)
    return -m - (s.eta() / s.eta0()) * wd * w


def lars_rule(s, i, g, w, momentum, coefficient, eps, wd):
    x = norm(g) + wd * norm(w)
    if x < eps:
        x += eps
    local_lr = s.eta() if norm(w) < eps else s.eta() * coefficient * norm(w) / x
    v = momentum * s.slot("v", i, g) + local_lr * (g + wd * w)
    s.set("v", i, v)
    return -v


def adam_rule(s, i, g, w, b1, b2, eps, wd=0.0, amsgrad=False, bias_correction=True):
    m = b1 * s.slot("m", i, g) + (1 - b1) * g
    v = b2 * s.slot("v", i, g) + (1 - b2) * g * g
    s.set("m", i, m)
    s.set("v", i, v)
    if amsgrad:
        v = np.maximum(s.slot("v_hat", i, g), v)
        s.set("v_hat", i, v)
    k = np.sqrt(1 - b2**s.t) / (1 - b1**s.t) if bias_correction else 1.0
    return -s.eta() * k * m / (np.sqrt(v) + eps) - (s.eta() / s.eta0()) * wd * w


def lamb_rule(s, i, g, w, b1, b2, gamma_l, gamma_u, eps, wd, bias_correction):
    m = b1 * s.slot("m", i, g) + (1 - b1) * g
    v = b2 * s.slot("v", i, g) + (1 - b2) * g * g
    s.set("m", i, m)
    s.set("v", i, v)
    c1, c2 = (1 - b1**s.t, 1 - b2**s.t) if bias_correction else (1.0, 1.0)
    r = (m / c1) / (np.sqrt(v / c2) + eps) + wd * w
    phi = min(max(norm(w), gamma_l), gamma_u)
    tau = phi / norm(r) if norm(r) > eps else 1.0
    return -s.eta() * tau * r


def graves_rule(s, i, g, w, decay, momentum, eps):
    n = decay * s.slot("n", i, g) + (1 - decay) * g * g
    g_bar = decay * s.slot("g", i, g) + (1 - decay) * g
    d = momentum * s.slot("d", i, g) - s.eta() * g / np.sqrt(n - g_bar**2 + eps)
    for name, value in (("n", n), ("g", g_bar), ("d", d)):
        s.set(name, i, value)
    return d


def lion_rule(s, i, g, w, b1, b2, wd):
    m = s.slot("m", i, g)
    u = np.sign(b1 * m + (1 - b1) * g)
    s.set("m", i, b2 * m + (1 - b2) * g)
    return -s.eta() * (u + wd * w)


def adagrad_rule(s, i, g, w, eps):
    big_g = s.slot("G", i, g) + g * g
    s.set("G", i, big_g)
    return -s.eta() * g / (np.sqrt(big_g) + eps)


def rmsprop_rule(s, i, g, w, decay, eps):
    v = decay * s.slot("v", i, g) + (1 - decay) * g * g
    s.set("v", i, v)
    return -s.eta() * g / (np.sqrt(v) + eps)


def adadelta_rule(s, i, g, w, decay, eps):
    eg = decay * s.slot("eg", i, g) + (1 - decay) * g * g
    delta = np.sqrt((s.slot("ed", i, g) + eps) / (eg + eps)) * g
    s.set("eg", i, eg)
    s.set("ed", i, decay * s.slot("ed", i, g) + (1 - decay) * delta**2)
    return -s.eta() * delta


def adabelief_rule(s, i, g, w, b1, b2, eps, wd, amsgrad, decouple, fixed, rectify):
    """The published rule (eps added once), with nnabla's options."""
    if not decouple:
        g = g + wd * w
    m = b1 * s.slot("m", i, g) + (1 - b1) * g
    sv = b2 * s.slot("s", i, g) + (1 - b2) * (g - m) ** 2
    s.set("m", i, m)
    s.set("s", i, sv)
    if amsgrad:
        sv = np.maximum(s.slot("s_max", i, g), sv)
        s.set("s_max", i, sv)
    t = s.t
    m_hat = m / (1 - b1**t)
    step = m_hat / (np.sqrt((sv + eps) / (1 - b2**t)) + eps)
    if rectify:
        rho_inf = 2 / (1 - b2) - 1
        rho = rho_inf - 2 * t * b2**t / (1 - b2**t)
        if rho > 4:
            step = step * np.sqrt(
                (rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)
            )
        else:
            step = m_hat
    decay = (wd if fixed else wd * s.eta()) * w if decouple else 0.0
    return -s.eta() * step - decay


ADAM = {"b1": 0.8, "b2": 0.99, "eps": 1e-3}
# (id, ours, reference factory, jit). Hyperparameters differ from the defaults so that swapped
# or dropped arguments show.
CASES = [
    ("sgd_is_gradtx_sgd", lambda: gradtx.sgd(LR), solver(sgd_rule, LR), True),
    (
        "momentum",
        lambda: gradtx.nnabla.momentum(LR, 0.8),
        solver(momentum_rule, LR, momentum=0.8),
        False,
    ),
    (
        "nesterov",
        lambda: gradtx.nnabla.momentum(LR, 0.8, nesterov=True),
        solver(nesterov_rule, LR, momentum=0.8),
        True,
    ),
    (
        "sgdw",
        lambda: gradtx.sgdw(LR, 0.8, 0.05),
        solver(sgdw_rule, LR, momentum=0.8, wd=0.05),
        True,
    ),
    (
        "lars",
        lambda: gradtx.nnabla.lars(LR, 0.8, 0.02, 1e-6, 0.01),
        solver(lars_rule, LR, momentum=0.8, coefficient=0.02, eps=1e-6, wd=0.01),
        True,
    ),
    ("adam", lambda: gradtx.nnabla.adam(LR, **ADAM), solver(adam_rule, LR, **ADAM), True),
    (
        "adamw",
        lambda: gradtx.nnabla.adamw(LR, **ADAM, weight_decay=0.05),
        solver(adam_rule, LR, **ADAM, wd=0.05),
        True,
    ),
    (
        "amsgrad_bias_correction",
        lambda: gradtx.nnabla.amsgrad(LR, **ADAM, bias_correction=True),
        solver(adam_rule, LR, **ADAM, amsgrad=True),
        True,
    ),
    (
        "amsgrad_default_is_gradtx_amsgrad",
        lambda: gradtx.amsgrad(
            LR, 0.8, 0.99, 1e-3, bias_correction_mu=False, bias_correction_nu=False
        ),
        solver(adam_rule, LR, **ADAM, amsgrad=True, bias_correction=False),
        True,
    ),
    (
        "lamb",
        lambda: gradtx.nnabla.lamb(LR, 0.8, 0.99, 0.5, 2.0, 1e-3, 0.01),
        solver(
            lamb_rule,
            LR,
            b1=0.8,
            b2=0.99,
            gamma_l=0.5,
            gamma_u=2.0,
            eps=1e-3,
            wd=0.01,
            bias_correction=False,
        ),
        True,
    ),
    (
        "lamb_bias_correction",
        lambda: gradtx.nnabla.lamb(LR, 0.8, 0.99, 0.0, 10.0, 1e-3, bias_correction=True),
        solver(
            lamb_rule,
            LR,
            b1=0.8,
            b2=0.99,
            gamma_l=0.0,
            gamma_u=10.0,
            eps=1e-3,
            wd=0.0,
            bias_correction=True,
        ),
        True,
    ),
    (
        "rmsprop_graves",
        lambda: gradtx.rmsprop_graves(LR, 0.9, 0.8, 1e-2),
        solver(graves_rule, LR, decay=0.9, momentum=0.8, eps=1e-2),
        True,
    ),
    (
        "rmsprop_graves_is_gradtx_rmsprop",
        lambda: gradtx.rmsprop(LR, 0.9, 1e-2, centered=True, momentum=0.8),
        solver(graves_rule, LR, decay=0.9, momentum=0.8, eps=1e-2),
        True,
    ),
    (
        "lion_is_gradtx_lion",
        lambda: gradtx.lion(LR, 0.8, 0.9, weight_decay=0.05),
        solver(lion_rule, LR, b1=0.8, b2=0.9, wd=0.05),
        True,
    ),
    (
        "adagrad_is_gradtx_adagrad",
        lambda: gradtx.adagrad(LR, initial_accumulator_value=0.0, eps=1e-3, eps_in_sqrt=False),
        solver(adagrad_rule, LR, eps=1e-3),
        True,
    ),
    (
        "rmsprop_is_gradtx_rmsprop",
        lambda: gradtx.rmsprop(LR, 0.8, 1e-3, eps_in_sqrt=False),
        solver(rmsprop_rule, LR, decay=0.8, eps=1e-3),
        True,
    ),
    (
        "adadelta_is_gradtx_adadelta",
        lambda: gradtx.adadelta(LR, rho=0.8, eps=1e-3),
        solver(adadelta_rule, LR, decay=0.8, eps=1e-3),
        True,
    ),
    (
        "adabound",
        lambda: gradtx.adabound(0.01, 0.02, 0.05, 0.8, 0.99, 1e-3, 0.01),
        bound_reference(0.01, 0.02, 0.05, 0.8, 0.99, 1e-3, weight_decay=0.01),
        True,
    ),
    (
        "amsbound_schedule",
        lambda: gradtx.amsbound(LR, 0.02, 0.05, weight_decay=0.01),
        bound_reference(LR, 0.02, 0.05, amsgrad=True, bias_correction=False, weight_decay=0.01),
        True,
    ),
]
BELIEF = {"b1": 0.8, "b2": 0.99, "eps": 1e-3, "wd": 0.05}
for flags in [
    {"amsgrad": False, "decouple": False, "fixed": False, "rectify": False},
    {"amsgrad": True, "decouple": True, "fixed": False, "rectify": False},
    {"amsgrad": False, "decouple": True, "fixed": True, "rectify": True},
]:
    CASES.append(
        (
            "adabelief" + "".join(f"-{k}" for k, on in flags.items() if on),
            lambda flags=flags: gradtx.nnabla.adabelief(
                LR, 0.8, 0.99, 1e-3, 0.05, amsgrad=flags["amsgrad"],
                weight_decouple=flags["decouple"], fixed_decay=flags["fixed"],
                rectify=flags["rectify"],
            ),
            solver(adabelief_rule, LR, **BELIEF, **flags),
            True,
        )
    )  # fmt: skip


@pytest.mark.across_versions
@pytest.mark.parametrize(("ours", "make_ref", "jit"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_matches_the_nnabla_rule(ours, make_ref, jit):
    compare_to_numpy(ours(), make_ref, jit=jit)


def test_rectified_adabelief_switches_to_the_adaptive_step_within_the_run():
    # Guards the rectify case: b2 = 0.99 gives rho_t > 4 from t = 6 on.
    b2 = 0.99
    rho_inf = 2 / (1 - b2) - 1
    rho = [rho_inf - 2 * t * b2**t / (1 - b2**t) for t in range(1, 101)]
    assert rho[0] <= 4 < rho[-1]


def test_momentum_nnabla_differs_from_trace_then_scale_under_a_schedule():
    # The reference sheet's quirk 7: with a changing learning rate sgd(momentum) is another rule.
    with pytest.raises(AssertionError):
        compare_to_numpy(gradtx.sgd(LR, 0.8), solver(momentum_rule, LR, momentum=0.8), steps=5)
    compare_to_numpy(gradtx.sgd(0.02, 0.8), solver(momentum_rule, 0.02, momentum=0.8), steps=20)


def nnabla_adabelief_accumulating(lr, b1, b2, eps):
    """nnabla's code: eps is added into the stored s every step (a bug we do not reproduce)."""

    def rule(s, i, g, w):
        m = b1 * s.slot("m", i, g) + (1 - b1) * g
        sv = b2 * s.slot("s", i, g) + (1 - b2) * (g - m) ** 2 + eps
        s.set("m", i, m)
        s.set("s", i, sv)
        return -s.eta() * (m / (1 - b1**s.t)) / (np.sqrt(sv / (1 - b2**s.t)) + eps)

    return solver(rule, lr)


def test_adabelief_does_not_accumulate_eps_like_nnabla():
    ours = lambda: gradtx.nnabla.adabelief(0.01, 0.9, 0.99, 1e-2)
    flags = {"amsgrad": False, "decouple": False, "fixed": False, "rectify": False}
    published = solver(adabelief_rule, 0.01, b1=0.9, b2=0.99, eps=1e-2, wd=0.0, **flags)
    compare_to_numpy(ours(), published, steps=20)
    with pytest.raises(AssertionError):
        compare_to_numpy(ours(), nnabla_adabelief_accumulating(0.01, 0.9, 0.99, 1e-2), steps=20)


def test_fixed_decay_needs_weight_decouple():
    with pytest.raises(ValueError) as info:
        gradtx.nnabla.adabelief(fixed_decay=True)
    assert str(info.value) == (
        "nnabla.adabelief: fixed_decay=True needs weight_decouple=True (nnabla ignores it "
        "otherwise), got weight_decouple=False"
    )


def test_lamb_nnabla_keeps_zero_tensors_at_zero_unless_gamma_l_is_positive():
    params = {"w": jnp.zeros(3), "b": jnp.ones(2)}
    g = {"w": jnp.ones(3), "b": jnp.ones(2)}
    tx = gradtx.nnabla.lamb(0.1)
    updates, _ = tx.update(g, tx.init(params), params)
    np.testing.assert_array_equal(np.asarray(updates["w"]), np.zeros(3))
    tx = gradtx.nnabla.lamb(0.1, gamma_l=0.5)
    updates, _ = tx.update(g, tx.init(params), params)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(updates["w"])), 0.05, rtol=1e-5)


def test_aliases_with_weight_decay_need_params():
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    for tx in (gradtx.sgdw(), gradtx.adabound(), gradtx.nnabla.lars(), gradtx.nnabla.lamb()):
        with pytest.raises(ValueError, match="needs the current parameters"):
            tx.update(g, tx.init(params))


@pytest.mark.parametrize(
    "name",
    [
        *(f"nnabla.{n}" for n in gradtx.nnabla.__all__ if not n.startswith("from_")),
        "sgdw",
        "rmsprop_graves",
        *_bound.__all__,
        *_eve.__all__,
    ],
)
def test_construction_errors_name_the_alias(name):
    factory = gradtx
    for part in name.split("."):
        factory = getattr(factory, part)
    with pytest.raises(ValueError) as info:
        factory(-1.0)
    assert str(info.value).startswith(f"{name}: "), str(info.value)
    assert "learning_rate must be >= 0, got -1.0" in str(info.value)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gradtx.sgdw(momentum=2.0), "sgdw: momentum must be in [0.0, 1.0], got 2.0 "
         "(from trace_with_lr: decay must be in [0.0, 1.0], got 2.0)"),
        (lambda: gradtx.nnabla.adamw(weight_decay=-1.0), "nnabla.adamw: weight_decay must be "
         ">= 0, got -1.0 (from weight_decay_by_lr_ratio: rate must be >= 0, got -1.0)"),
        (lambda: gradtx.adabound(final_lr=0.0),
         "adabound: bound_lr: final_lr must be > 0, got 0.0"),
        (lambda: gradtx.amsbound(weight_decay=-1.0), "amsbound: weight_decay must be >= 0, got "
         "-1.0 (from weight_decay: rate must be >= 0, got -1.0)"),
        (lambda: gradtx.rmsprop_graves(momentum=3.0), "rmsprop_graves: momentum must be in "
         "[0.0, 1.0], got 3.0 (from trace: decay must be in [0.0, 1.0], got 3.0)"),
        (lambda: gradtx.eve(k=2.0, K=1.0), "eve: scale_by_eve: k must be <= K, got k=2.0 and "
         "K=1.0"),
        (lambda: gradtx.nnabla.lamb(gamma_l=1.0, gamma_u=0.5), "nnabla.lamb: "
         "scale_by_lamb_trust_ratio: gamma_l must be <= gamma_u, got gamma_l=1.0 and gamma_u=0.5"),
    ],
)  # fmt: skip
def test_errors_use_the_alias_argument_names(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message
