"""Every optimizer in `SOLVERS` (the bounded, Eve, normalized-SGD, RETURNN and NNabla families)
trains a logistic regression about as well as Adam.

The data are generated (512 points, 8 features, labels drawn from a known logistic model), the
loss is the mean cross-entropy of the full batch, and each optimizer runs 300 steps in one jitted
`lax.scan` (Eve gets the loss as `value=`). The optimum L* comes from Newton's method in NumPy. A
run passes when it removes at least 95% of the removable loss L0 - L* and ends within 5% of that
gap of Adam's final loss: an optimizer that stalls, diverges or steps the wrong way misses both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

STEPS = 300


def _dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8))
    w_true = rng.normal(size=8)
    p = 1.0 / (1.0 + np.exp(-(x @ w_true + 0.5)))
    y = (rng.uniform(size=512) < p).astype(np.float64)
    return x, y


X, Y = _dataset()


def _loss(params, x=X, y=Y):
    logits = x @ params["w"] + params["b"]
    return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)


def _optimum() -> float:
    """The minimal loss, by Newton's method on (w, b) in float64."""
    xb = np.hstack([X, np.ones((len(X), 1))])
    theta = np.zeros(xb.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(xb @ theta)))
        grad = xb.T @ (p - Y) / len(Y)
        hess = (xb * (p * (1 - p))[:, None]).T @ xb / len(Y)
        theta -= np.linalg.solve(hess, grad)
    logits = xb @ theta
    return float(np.mean(np.logaddexp(0.0, logits) - Y * logits))


def _final_loss(tx: gradtx.GradientTransformation) -> float:
    x, y = jnp.asarray(X, jnp.float32), jnp.asarray(Y, jnp.float32)
    params = {"w": jnp.zeros(8, jnp.float32), "b": jnp.zeros([], jnp.float32)}

    @jax.jit
    def train(params):
        def body(carry, _):
            p, s = carry
            value, grads = jax.value_and_grad(_loss)(p, x, y)
            updates, s = tx.update(grads, s, p, value=value)
            return (gradtx.apply_updates(p, updates), s), None

        (p, _), _ = jax.lax.scan(body, (params, tx.init(params)), None, length=STEPS)
        return _loss(p, x, y)

    return float(train(params))


def _decay(peak: float):
    return lambda count: peak / (1.0 + 0.02 * count)


SOLVERS = {
    "adabound": lambda: gradtx.adabound(0.05, final_lr=0.5),
    "amsbound": lambda: gradtx.amsbound(0.05, final_lr=0.5, bias_correction=True),
    "eve": lambda: gradtx.eve(0.05),
    "normalized_sgd": lambda: gradtx.normalized_sgd(_decay(0.5)),
    "neural_optimizer1": lambda: gradtx.neural_optimizer1(2.0),
    "grad_variance_scaled": lambda: gradtx.grad_variance_scaled(2.0),
    "returnn.nadam": lambda: gradtx.returnn.nadam(0.05),
    "returnn.amsgrad": lambda: gradtx.returnn.amsgrad(0.05),
    "nnabla.momentum": lambda: gradtx.nnabla.momentum(0.5, 0.9),
    "sgdw": lambda: gradtx.sgdw(0.5, 0.9, weight_decay=1e-5),
    "rmsprop_graves": lambda: gradtx.rmsprop_graves(0.01),
    "nnabla.adam": lambda: gradtx.nnabla.adam(0.05),
    "nnabla.adamw": lambda: gradtx.nnabla.adamw(0.05, weight_decay=1e-5),
    "nnabla.amsgrad": lambda: gradtx.nnabla.amsgrad(0.05, bias_correction=True),
    "nnabla.lars": lambda: gradtx.nnabla.lars(_decay(20.0), coefficient=0.05),
    "nnabla.lamb": lambda: gradtx.nnabla.lamb(_decay(0.2), gamma_l=0.1),
    "nnabla.adabelief": lambda: gradtx.nnabla.adabelief(0.05, rectify=True),
}


@pytest.fixture(scope="module")
def reference() -> dict:
    optimum = _optimum()
    initial = float(_loss({"w": np.zeros(8), "b": 0.0}))
    return {"optimum": optimum, "gap": initial - optimum, "adam": _final_loss(gradtx.adam(0.05))}


def test_adam_itself_gets_close_to_the_optimum(reference):
    assert reference["adam"] - reference["optimum"] < 0.01 * reference["gap"], reference


@pytest.mark.parametrize("name", list(SOLVERS))
def test_reaches_a_loss_comparable_to_adams(name, reference):
    final = _final_loss(SOLVERS[name]())
    optimum, gap, adam = reference["optimum"], reference["gap"], reference["adam"]
    assert np.isfinite(final)
    assert final - optimum < 0.05 * gap, (final, reference)
    assert final - adam < 0.05 * gap, (final, reference)
