"""The moment rules written with `gradtx.transforms._rule.rule` take their moment dtypes: bf16,
`gradtx.quantized()` 8-bit (the dynamic table and the square-root map) and `quantized(bits=4)`
buffers are stored as asked, and 20 steps on a small quadratic end at about the loss that float32
moments reach.

One configuration per rule, and one compiled program per rule: its float32, bf16, 8-bit and
4-bit runs are `jax.lax.scan`s of one jitted function.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.state import _quantize as Q

STEPS = 20
#: A narrow run's final loss is within this factor of the float32 run's (either way); measured:
#: within 1.12 (8-bit Adan), most within 1.05.
FACTOR = 1.25
#: 4-bit runs only have to descend (to this fraction of the start, or to within FACTOR of float32
#: where float32 itself descends less; measured at most 0.2 of the start): on this
#: noiseless quadratic a 4-bit first moment sticks at a level (a decay by less than half the gap
#: to the next level rounds back up), so Adam-type rules overshoot coordinates that have
#: converged (final loss ~4.7x float32's for Adam; 0.89x with 4-bit second moments alone).
#: Training quality with 4-bit states is measured on the language model (`--lowbit`).
DESCENT_4BIT = 0.35
#: Rules whose moments hold differences, which 4-bit codes cannot resolve (the centred second
#: moment of `scale_by_stddev`, v - m^2, loses all its digits; Adan's moment of gradient
#: differences): stored and finite, not compared.
CANCELLING = ("scale_by_stddev", "scale_by_adan")
Q8 = gradtx.quantized(block_size=16, min_size=0)  # every leaf below is quantized
SQRT8 = gradtx.quantized(block_size=16, min_size=0, mapping="sqrt")
Q4 = gradtx.quantized(block_size=16, min_size=0, bits=4)
CODECS = {"quantized": (Q8, "dynamic"), "sqrt8": (SQRT8, "sqrt8"), "4bit": (Q4, None)}


class Rule(NamedTuple):
    make: Any  # (dtype keywords) -> GradientTransformation, a descent step
    fields: dict[str, str]  # state field (or ElementwiseState slot) -> its dtype keyword
    float_only: tuple[str, ...] = ()  # keywords that refuse 8-bit storage (they get bf16)


def _descent(lr: float, tx: Any) -> Any:
    return gradtx.chain(tx, gradtx.scale(-lr))


MOMENTS = {"mu": "mu_dtype", "nu": "nu_dtype"}

RULES = {
    # _adam.py
    "scale_by_adam": Rule(lambda **d: _descent(0.1, gradtx.scale_by_adam(**d)), MOMENTS),
    "scale_by_adamax": Rule(lambda **d: _descent(0.1, gradtx.scale_by_adamax(**d)), MOMENTS),
    "scale_by_amsgrad": Rule(
        lambda **d: _descent(0.1, gradtx.scale_by_amsgrad(**d)), {**MOMENTS, "nu_max": "nu_dtype"}
    ),
    "scale_by_adam_eps_hat": Rule(
        lambda **d: _descent(0.1, gradtx.scale_by_adam_eps_hat(amsgrad=True, **d)),
        {**MOMENTS, "nu_max": "nu_dtype"},
    ),
    # _adam_variants.py
    "scale_by_belief": Rule(lambda **d: _descent(0.1, gradtx.scale_by_belief(**d)), MOMENTS),
    "scale_by_yogi": Rule(lambda **d: _descent(0.1, gradtx.scale_by_yogi(**d)), MOMENTS),
    "scale_by_radam": Rule(
        lambda **d: _descent(0.1, gradtx.scale_by_radam(threshold=4.0, **d)), MOMENTS
    ),
    "scale_by_novograd": Rule(
        lambda **d: _descent(0.1, gradtx.scale_by_novograd(**d)), MOMENTS, ("nu_dtype",)
    ),
    # _bounded.py
    "bound_lr": Rule(lambda **d: gradtx.bound_lr(0.1, final_lr=0.1, **d), MOMENTS),
    # _eve.py
    "scale_by_eve": Rule(lambda **d: _descent(0.1, gradtx.scale_by_eve(**d)), MOMENTS),
    # _sign.py
    "scale_by_lion": Rule(
        lambda **d: _descent(0.05, gradtx.scale_by_lion(**d)), {"mu": "mu_dtype"}
    ),
    "scale_by_sign_agreement": Rule(
        lambda **d: _descent(0.1, gradtx.scale_by_sign_agreement(**d)), {"m": "mu_dtype"}
    ),
    # _momentum.py
    "trace": Rule(
        lambda **d: _descent(0.05, gradtx.trace(0.9, nesterov=True, **d)),
        {"trace": "accumulator_dtype"},
    ),
    "trace_with_lr": Rule(
        lambda **d: gradtx.trace_with_lr(0.05, 0.9, **d),
        {"trace": "accumulator_dtype"},
        ("accumulator_dtype",),
    ),
    # contrib/_laprop.py
    "scale_by_laprop": Rule(
        lambda **d: _descent(0.1, gradtx.contrib.scale_by_laprop(**d)), MOMENTS
    ),
    # _adaptive.py
    "scale_by_rms": Rule(
        lambda **d: _descent(0.02, gradtx.scale_by_rms(bias_correction=True, **d)),
        {"nu": "nu_dtype"},
    ),
    "scale_by_stddev": Rule(
        lambda **d: _descent(0.02, gradtx.scale_by_stddev(eps=1e-4, **d)), MOMENTS
    ),
    "scale_by_grad_variance": Rule(
        lambda **d: _descent(0.1, gradtx.scale_by_grad_variance(**d)),
        {"m": "mu_dtype", "v": "nu_dtype"},
    ),
    # _adan.py
    "scale_by_adan": Rule(
        lambda **d: _descent(0.1, gradtx.scale_by_adan(**d)),
        {"mu": "mu_dtype", "delta": "mu_dtype", "nu": "nu_dtype"},
    ),
}


def _params() -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    # two leaves with blocks of different widths (16 along the last axis; 10 values, one block)
    return {
        "w": jnp.asarray(rng.standard_normal((4, 16)), jnp.float32),
        "b": jnp.asarray(rng.standard_normal(10), jnp.float32),
    }


def _loss(p: dict[str, jax.Array]) -> jax.Array:
    return sum(
        jnp.sum(jnp.linspace(0.5, 2.0, x.size).reshape(x.shape) * (x - 0.5) ** 2)
        for x in jax.tree.leaves(p)
    )


def _configs(rule: Rule) -> dict[str, dict[str, Any]]:
    keywords = sorted(set(rule.fields.values()))
    return {
        "float32": {},
        "bfloat16": {k: jnp.bfloat16 for k in keywords},
        **{
            name: {k: jnp.bfloat16 if k in rule.float_only else spec for k in keywords}
            for name, (spec, _) in CODECS.items()
        },
    }


def _slots(state: Any) -> Any:
    rule_state = state[0] if isinstance(state, tuple) and not hasattr(state, "_fields") else state
    if hasattr(rule_state, "slots"):  # ElementwiseState
        return rule_state.slots
    return rule_state._asdict()


@pytest.mark.parametrize("name", list(RULES))
def test_narrow_moments_are_stored_as_asked_and_descend_like_float32(name):
    rule = RULES[name]
    configs = _configs(rule)
    txs = {c: rule.make(**kw) for c, kw in configs.items()}
    params = _params()

    @jax.jit
    def run(params):
        out = {}
        for config, tx in txs.items():

            def step(carry, _, tx=tx):
                p, s = carry
                value, g = jax.value_and_grad(_loss)(p)
                u, s = tx.update(g, s, p, value=value)
                return (gradtx.apply_updates(p, u), s), None

            (p, s), _ = jax.lax.scan(step, (params, tx.init(params)), None, length=STEPS)
            out[config] = (_loss(p), s)
        return out

    out = run(params)
    start, loss32 = float(_loss(params)), float(out["float32"][0])
    assert loss32 < 0.6 * start, (name, start, loss32)  # the configuration does descend
    for config in ("bfloat16", *CODECS):
        loss, state = out[config]
        loss = float(loss)
        if config == "4bit":
            assert np.isfinite(loss), (name, config, loss)
            if name not in CANCELLING:
                bound = max(DESCENT_4BIT * start, FACTOR * loss32)
                assert loss < min(bound, start), (name, config, start, loss, loss32)
        else:
            assert loss32 / FACTOR <= loss <= FACTOR * loss32, (name, config, start, loss, loss32)
        slots = _slots(state)
        for field, keyword in rule.fields.items():
            wanted = configs[config][keyword]
            leaves = jax.tree.leaves(slots[field], is_leaf=Q.is_quantized)
            assert len(leaves) == len(params), (name, config, field)
            for leaf in leaves:
                if config in CODECS and wanted is CODECS[config][0]:
                    assert Q.is_quantized(leaf), (name, config, field, type(leaf))
                    assert leaf.block_size == 16, (name, config, field)
                    codec = CODECS[config][1] or ("dynamic4" if leaf.signed else "linear4")
                    assert leaf.codec == codec, (name, config, field, leaf.codec)
                else:
                    assert leaf.dtype == jnp.bfloat16, (name, config, field, leaf.dtype)
