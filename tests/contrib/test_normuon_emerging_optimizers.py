"""NorMuon against its authors' package: NVIDIA's emerging-optimizers (0.3.0),
`AdaptiveMuon(moment2_method="normuon")`, over 60 float32 steps.

The reference is run as the authors' code runs NorMuon: the Frobenius norm of the orthogonalised
update kept (gradtx's `update_scale="preserve_norm"`), Muon's width scaling
sqrt(max(1, out / in)) (its `scale_mode="shape_scaling"`), decoupled weight decay, and its
Newton-Schulz in float32 (`fp32_matmul_prec="highest"`; its default "medium" runs the iteration
in bfloat16, a 1e-2 difference by itself, which gradtx does not copy). The Newton-Schulz
coefficients are the reference's own tables, read from it ("simple" is gradtx's default).

Tolerance 1e-5 absolute on params of size ~1 (measured <= 1.5e-6): float32 rounding of the
Newton-Schulz matmuls in another order, and where eps sits (the reference's rsqrt(max(v, eps))
and max(||X||, 1e-7) against gradtx's 1 / (sqrt(v) + eps) and ||X|| + eps after dividing X by
its peak), with eps = 1e-10.

Where the two legitimately differ (documented in `scale_by_normuon`): for a wide torch weight
(out < in) the reference averages the squared update over the output axis, one statistic per
*input*; the paper (Algorithm 1: one second moment per row of the d_out x d_in matrix, per output
neuron) and gradtx keep one per output neuron for every shape. The two agree on square and tall
weights, which is what the exact comparison uses; the wide one is tested as the departure."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import gradtx
from gradtx.contrib import normuon

from .author_packages import load
from .torch_reference import STEPS, gradtx_trajectory, max_diff, torch_trajectory

torch = pytest.importorskip("torch")

LR = 0.02
NS_STEPS = 5
# gradtx's (fan_in, fan_out) matrices; the torch weights are their transposes (out, in):
# tall (10, 6) and square (8, 8) in torch's layout, where the two rules agree, and wide (4, 10).
SHAPES = {"tall": (6, 10), "square": (8, 8), "wide": (10, 4)}
AGREE = ("tall", "square")


def _adaptive_muon():
    return load("emerging_optimizers", "orthogonalized_optimizers.adaptive_muon", absolute=True)


def _coefficients(name: str):
    """The reference's table `name` as gradtx's one row per iteration: the reference cycles
    through its rows for `NS_STEPS` iterations ("simple" is one row, used five times)."""
    utils = load("emerging_optimizers", "orthogonalized_optimizers.muon_utils", absolute=True)
    rows = utils._COEFFICIENT_SETS[name]
    return tuple(tuple(rows[i % len(rows)]) for i in range(NS_STEPS))


def _problem(seed: int = 0):
    """Params and a gradient sequence whose scale varies per step (distinct spectra)."""
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    step_scale = np.exp(rng.normal(size=(STEPS, 1, 1))).astype(np.float32)
    grads = {
        k: (step_scale * rng.normal(size=(STEPS, *s))).astype(np.float32) for k, s in SHAPES.items()
    }
    return params, grads


def _torch_layout(tree):
    return {k: np.swapaxes(v, -1, -2).copy() for k, v in tree.items()}


def _reference(params, grads, *, coefficients, nesterov, wd):
    am = _adaptive_muon()
    made = []

    def make(tensors):
        opt = am.AdaptiveMuon(
            tensors,
            lr=LR,
            momentum=0.95,
            weight_decay=wd,
            nesterov=nesterov,
            weight_decay_method="decoupled",
            fp32_matmul_prec="highest",
            coefficient_type=coefficients,
            num_ns_steps=NS_STEPS,
            scale_mode="shape_scaling",
            moment2_method="normuon",
            beta2=0.95,
            eps=1e-10,
        )
        made.append((opt, tensors))
        return opt

    trajectory = torch_trajectory(make, _torch_layout(params), _torch_layout(grads))
    opt, tensors = made[0]
    moments = {
        k: tuple(opt.state[t]["moment2_buffer"].shape) for k, t in zip(params, tensors, strict=True)
    }
    return _torch_layout(trajectory), moments


@functools.cache
def _run(coefficients: str, nesterov: bool, wd: float):
    params, grads = _problem()
    tx = normuon(
        LR,
        ns_coeffs=_coefficients(coefficients),
        ns_steps=NS_STEPS,
        eps=1e-10,
        weight_decay=wd,
        nesterov=nesterov,
        update_scale="preserve_norm",
    )
    ours = gradtx_trajectory(tx, params, grads)
    ref, moments = _reference(params, grads, coefficients=coefficients, nesterov=nesterov, wd=wd)
    return params, ours, ref, moments


CASES = [
    ("simple", True, 0.1),  # gradtx's default coefficients, Nesterov, decoupled decay
    ("simple", False, 0.0),  # the paper's Algorithm 1 momentum (no Nesterov), no decay
    ("quintic", True, 0.1),  # the reference's default table: five rows, one per iteration
]


@pytest.mark.parametrize(("coefficients", "nesterov", "wd"), CASES)
def test_matches_emerging_optimizers_normuon(coefficients, nesterov, wd):
    params, ours, ref, _ = _run(coefficients, nesterov, wd)
    agree = {k: ours[k] for k in AGREE}
    diff = max_diff(agree, {k: ref[k] for k in AGREE})
    assert diff < 1e-5, diff
    for k in AGREE:  # it moved
        assert np.abs(ours[k][-1] - params[k]).max() > 0.05


def test_wide_weights_keep_one_moment_per_output_neuron_where_the_reference_keeps_one_per_input():
    """The departure, on the same runs: the reference's second moment of the wide (4, 10) torch
    weight is one per input (shape (1, 10)); gradtx's is one per output neuron (4,) as in the
    paper, so the wide weight's trajectory differs (while tall and square match above)."""
    _, ours, ref, moments = _run(*CASES[0])
    assert moments == {"tall": (10, 1), "square": (8, 1), "wide": (1, 10)}
    state = normuon(LR).init({k: np.zeros(s, np.float32) for k, s in SHAPES.items()})
    nus = gradtx.tree.get(state, "normuon/0/nu")
    assert {k: v.shape for k, v in nus.items()} == {"tall": (10,), "square": (8,), "wide": (4,)}
    assert max_diff({"wide": ours["wide"]}, {"wide": ref["wide"]}) > 1e-3
