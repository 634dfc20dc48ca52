"""`from_returnn`: RETURNN's optimizer classes and gradient options (the seed's updater
documentation), against the matching gradtx aliases and RETURNN's formulas."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx import config as gc
from gradtx.returnn import from_returnn

from .common import loss_fn, run_pair, small_params

LR = 0.01
EPS = 1e-16  # RETURNN's optimizer_epsilon, injected into every class taking `epsilon`
# class spelling -> (class options, the gradtx alias built by hand)
CLASSES = {
    "adam": ({}, lambda: gradtx.nnabla.adam(LR, eps=EPS)),
    "AdamOptimizer": ({"beta1": 0.8}, lambda: gradtx.nnabla.adam(LR, b1=0.8, eps=EPS)),
    "CustomAdamOptimizer": ({"epsilon": 1e-3}, lambda: gradtx.nnabla.adam(LR, eps=1e-3)),
    "NadamOptimizer": ({"beta2": 0.99}, lambda: gradtx.returnn.nadam(LR, b2=0.99, eps=EPS)),
    "AMSGradOptimizer": (
        {"epsilon": 1e-4, "decay": True},
        lambda: gradtx.returnn.amsgrad(LR, decay=True, eps=1e-4),
    ),
    "GradientDescent": ({}, lambda: gradtx.sgd(LR)),
    "CustomGradientDescentOptimizer": ({}, lambda: gradtx.sgd(LR)),
    "sgd": (
        {"momentum": 0.9, "nesterov": True},
        lambda: gradtx.sgd(LR, momentum=0.9, nesterov=True),
    ),
    "MomentumOptimizer": (
        {"momentum": 0.5, "use_nesterov": False},
        lambda: gradtx.sgd(LR, momentum=0.5),
    ),
    "NormalizedSGD": ({}, lambda: gradtx.normalized_sgd(LR)),
    "NeuralOptimizer1": (
        {"decrease_factor": 0.2},
        lambda: gradtx.neural_optimizer1(LR, decrease_factor=0.2),
    ),
    "GradVarianceScaledOptimizer": (
        {"beta2": 0.99},
        lambda: gradtx.grad_variance_scaled(LR, beta2=0.99, eps=EPS),
    ),
}


def _close(ours, ref, exact=False):
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        if exact:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        else:
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-7)
        assert np.abs(np.asarray(a)).sum() > 0


@pytest.mark.parametrize("cls", list(CLASSES))
def test_each_class_equals_the_matching_gradtx_alias(cls):
    options, hand = CLASSES[cls]
    tx = from_returnn({"optimizer": {"class": cls, **options}, "learning_rate": LR})
    _close(*run_pair(tx, hand(), small_params()))
    assert float(tx.learning_rate_at(0)) == pytest.approx(LR)


def test_adam_matches_returnn_formula_in_numpy():
    """RETURNN's (TF's) Adam: lr_t = lr sqrt(1-b2^t)/(1-b1^t), w -= lr_t m / (sqrt(v) + eps)."""
    tx = from_returnn({"optimizer": "adam", "learning_rate": LR, "optimizer_epsilon": 1e-8})
    params = small_params()
    ours, _ = run_pair(tx, tx, params)
    p = {k: np.asarray(v, np.float64) for k, v in params["dense"].items()}
    m = {k: 0 * v for k, v in p.items()}
    v = {k: 0 * x for k, x in p.items()}
    for t in range(1, 51):
        g = jax.grad(loss_fn)({"dense": {k: jnp.asarray(x, jnp.float32) for k, x in p.items()}})
        lr_t = LR * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        for k in p:
            gk = np.asarray(g["dense"][k], np.float64)
            m[k] = 0.9 * m[k] + 0.1 * gk
            v[k] = 0.999 * v[k] + 0.001 * gk * gk
            step = -lr_t * m[k] / (np.sqrt(v[k]) + 1e-8)
            np.testing.assert_allclose(
                np.asarray(ours["dense"][k][t - 1]), step, rtol=2e-4, atol=1e-7
            )
            p[k] = p[k] + step


def test_gradient_options_in_returnn_order():
    cfg = {
        "optimizer": {"class": "adam", "learning_rate_multiplier": 0.5},
        "learning_rate": 0.02,
        "gradient_clip": 3.0,
        "gradient_clip_norm": 2.0,
        "gradient_clip_global_norm": 1.5,
        "gradient_nan_inf_filter": True,
        "accum_grad_multiple_step": 3,
    }
    tx = from_returnn(cfg)
    hand = gradtx.accumulate_k_steps(
        gradtx.chain(
            gradtx.clip(3.0),
            gradtx.clip_by_norm(2.0),
            gradtx.clip_by_global_norm(1.5),
            gradtx.zero_nans(non_finite=True),
            gradtx.nnabla.adam(0.01, eps=EPS),
        ),
        3,
        average=False,
    )
    _close(*run_pair(tx, hand, small_params()))
    noisy = from_returnn({"optimizer": "sgd", "learning_rate": 0.1, "gradient_noise": 0.3})
    assert noisy.config["noise"] == {"eta": pytest.approx(0.09), "gamma": 0.0, "truncation": 2.0}
    _close(
        *run_pair(
            noisy,
            gradtx.chain(gradtx.add_noise(0.09, 0.0, 0, truncation=2.0), gradtx.sgd(0.1)),
            small_params(),
        ),
        exact=True,
    )


def test_config_momentum_is_injected_and_round_trip():
    tx = from_returnn({"optimizer": "momentum", "momentum": 0.7, "learning_rate": 0.1})
    assert tx.config["optimizer"] == {"name": "sgd", "learning_rate": 0.1, "momentum": 0.7}
    _close(*run_pair(tx, gc.from_config(gc.to_config(tx)), small_params()), exact=True)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (
            {"optimizer": {"class": "adamx"}},
            r"^optimizer\.class: unsupported optimizer class 'adamx' \(did you mean 'adam'",
        ),
        (
            {"optimizer": {"class": "adam", "beta1": 1.5}},
            r"^optimizer\.beta1: must be in \[0\.0, 1\.0\), got 1\.5",
        ),
        (
            {"optimizer": {"class": "adam", "beta_1": 0.9}},
            r"^optimizer\.beta_1: adam takes no option 'beta_1' \(did you mean 'beta1'",
        ),
        (
            {"optimizer": {"class": "adam", "learning_rate": 0.1}},
            r"^optimizer\.learning_rate: the learning rate is the config's learning_rate",
        ),
        (
            {"optimizer": "adam", "learning_rate_control": "newbob"},
            r"^learning_rate_control: unsupported RETURNN option 'learning_rate_control' \(epoch",
        ),
        (
            {"optimizer": "adam", "gradient_clip_avg_norm": 1.0},
            r"^gradient_clip_avg_norm: unsupported RETURNN option",
        ),
        (
            {"optimizer": "adam", "adam": True},
            r"^adam: unsupported RETURNN option 'adam' \(a "
            r"legacy optimizer flag",
        ),
        (
            {"optimizer": "adam", "learning_rte": 0.1},
            r"^learning_rte: unsupported RETURNN option 'learning_rte' \(did you mean "
            r"'learning_rate'",
        ),
        ({"learning_rate": 0.1}, r"^optimizer: missing"),
        ({"optimizer": {"beta1": 0.9}}, r"^optimizer\.class: missing"),
        ({"optimizer": "momentum"}, r"^optimizer\.momentum: missing: MomentumOptimizer needs"),
        ({"optimizer": "adam", "momentum": 0.9}, r"^momentum: unused: the class 'adam' takes no"),
        (
            {"optimizer": "adam", "gradient_clip_global_norm": -1.0},
            r"^gradient_clip_global_norm: must be > 0, got -1\.0",
        ),
        (
            {"optimizer": "adam", "accum_grad_multiple_step": 0},
            r"^accum_grad_multiple_step: must be >= 1, got 0",
        ),
        ({"optimizer": "adam", "learning_rate": "fast"}, r"^learning_rate: must be a number"),
    ],
)
def test_unsupported_or_wrong_options_are_named(cfg, message):
    with pytest.raises(gc.ConfigError, match=message):
        from_returnn(cfg)
