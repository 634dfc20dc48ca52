"""PSGD Kron against its author's package, `psgd_jax.kron` (psgd-jax 0.2.9, E. Walters), with
the random draws fixed: the preconditioner updated every step (probability 1) and the same
probes V fed to both sides (psgd-jax's `jax.random.normal` replaced, while its step is traced, by
the probes that the test passes in; gradtx's `_probes` likewise), no balancing unless a test
asks for it on both sides.

Tolerance: 1e-5 absolute on params (size ~1) and on the factors Q after 60 float32 steps
(measured <= 6e-7 on params, <= 2.4e-7 on Q, in every comparison): both sides compute the same
rule in float32 but contract in different orders (psgd-jax's einsum strings and its transposed
triangular solves against per-axis tensordots), and gradtx divides the fit's two terms by their
common max-norm; the fit feeds back through the factors, so rounding grows slowly with the
steps. 1e-5 rather than 1e-4 because psgd-jax's damping alone moves the trajectory by ~1e-4.

Where the two legitimately differ (each documented in `scale_by_kron` and tested here):

* Probe damping. psgd-jax fits the factors to ``g + sqrt(eps_f32) mean|g| V`` rather than to
  ``g``; Li's PSGD (arXiv:1512.04202 and the Lie-group paper, arXiv:1809.10232) fits to the
  gradient itself, and so does gradtx (and pytorch_optimizer.Kron). The exact comparison takes
  psgd-jax's damping out (its ``finfo(float32).eps`` read as 0 while it is traced); with it left
  in, the trajectories differ by ~1e-4 (3.6e-4 on a constant rank-one gradient), not more.
* The update decision. psgd-jax 0.2.9 updates deterministically whenever a counter reaches
  ``1 / p``; gradtx draws Bernoulli(p) (Li's rule), the same expected frequency.
* The schedule's argument. The schedule *functions* are the same; psgd-jax calls it with the
  step count after the increment (1 at the first step), gradtx with the steps taken before (0
  at the first step, as pytorch_optimizer does), so gradtx's probability lags by one step (which
  only matters for custom schedules; the default is flat at 1 for 500 steps).
* The RMS clip: psgd-jax ``u / max(1, rms(u) / 1.1)``, gradtx ``u min(1, 1.1 / (rms(u) +
  1e-6))`` (pytorch_optimizer's); 1e-6 relative. (The clip is psgd-jax's addition; the paper
  has none.)
* Weight decay's default mask: psgd-jax (optax `add_decayed_weights`, mask None) decays every
  leaf, gradtx's `kron` only leaves of rank >= 2 (pytorch_optimizer's rule); with an explicit
  mask they agree.
* Balancing: psgd-jax balances with probability 0.01 per update (fixed), gradtx's
  `balance_probability` (default 0.01); balancing leaves P unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import types
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.contrib import _kron, _kron_slice
from gradtx.contrib._kron import kron, precond_update_prob_schedule

# psgd-jax 0.2.9 does `from optax._src import clipping`, a module that optax 0.2.8 moved;
# psgd_jax.kron never uses it, so an empty placeholder lets the import succeed.
sys.modules.setdefault("optax._src.clipping", types.ModuleType("optax._src.clipping"))
pytest.importorskip("psgd_jax")
psgd_kron = pytest.importorskip("psgd_jax.kron")

STEPS = 60
LR = 3e-2
TOL = 1e-5
# With max_size_triangular=8: (8, 6) gets two triangular factors, (4, 10) a triangular and a
# diagonal one (psgd's fallback for its 10-axis), (6,) and () are elementwise (diagonal/scalar).
SHAPES = {"a": (8, 6), "b": (6,), "c": (4, 10), "s": ()}
MAX_SIZE = 8


# -- the problem: gradients with a Kronecker-structured covariance, distinct spectra -----------


def _factor(rng, n, top):
    """A random n x n matrix with singular values spread geometrically from `top` to 1/top."""
    u, _ = np.linalg.qr(rng.normal(size=(n, n)))
    v, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (u * np.geomspace(top, 1 / top, n)) @ v.T


def _problem(shapes=SHAPES, seed=0):
    """(params, gradients (STEPS, *shape) per leaf, probes (STEPS, *shape) per leaf), float32:
    a matrix leaf's gradient is `L Z R^T` with Z ~ N(0, I) and L, R of distinct spectra (a
    3-D leaf's slices along axis 0 likewise), so the preconditioner has something to learn; the
    overall scale varies per step."""
    rng = np.random.default_rng(seed)
    scale = np.exp(0.5 * rng.normal(size=STEPS))
    params, grads, probes = {}, {}, {}
    for k, s in sorted(shapes.items()):
        params[k] = rng.normal(size=s).astype(np.float32)
        z = rng.normal(size=(STEPS, *s))
        if len(s) >= 2:
            left, right = _factor(rng, s[-2], 3.0), _factor(rng, s[-1], 2.0)
            z = np.einsum("ij,t...jk,lk->t...il", left, z, right)
        elif len(s) == 1:
            z = z * np.geomspace(4.0, 0.25, s[0])
        grads[k] = (scale.reshape((-1,) + (1,) * len(s)) * z).astype(np.float32)
        probes[k] = rng.normal(size=(STEPS, *s)).astype(np.float32)
    return params, grads, probes


# -- the two sides, each one jitted step with the probes (and psgd-jax's switches) as arguments --


class _Proxy:
    """A module stand-in: `over`'s attributes, the rest from `real`."""

    def __init__(self, real, **over):
        self._real, self._over = real, over

    def __getattr__(self, name):
        return self._over[name] if name in self._over else getattr(self._real, name)


def _patched_psgd(probes, balance, damping, clip):
    """Patches of psgd_jax.kron's module globals while its step is traced: `jax.random.normal`
    gives `probes` (in leaf order), `jax.random.uniform` (its balance draw, the only one) 0 when
    `balance` (balance) else 1, `jnp.finfo(float32).eps` (its damping's, the only use) `damping`
    times the true eps (0: no damping) and, without `clip`, `numerics.abs_sq` (its RMS clip's,
    the only use) zeros. `balance` and `damping` may be traced."""
    queue = iter(probes)

    def normal(key, shape=(), dtype=jnp.float32):
        v = next(queue)
        assert tuple(v.shape) == tuple(shape), (v.shape, shape)
        return v.astype(dtype)

    def uniform(key, shape=(), *args, **kwargs):
        return jnp.broadcast_to(jnp.where(balance, 0.0, 1.0), shape)

    def finfo(dtype):
        real = jnp.finfo(dtype)
        return types.SimpleNamespace(eps=damping * real.eps, tiny=real.tiny)

    numerics = psgd_kron.numerics
    if not clip:
        numerics = _Proxy(numerics, abs_sq=jnp.zeros_like)
    fake_jax = _Proxy(jax, random=_Proxy(jax.random, normal=normal, uniform=uniform))
    return (
        mock.patch.object(psgd_kron, "jax", fake_jax),
        mock.patch.object(psgd_kron, "jnp", _Proxy(jnp, finfo=finfo)),
        mock.patch.object(psgd_kron, "numerics", numerics),
    )


def _psgd_step(clip=True, **kwargs):
    """psgd-jax's kron, the update every step; `step(params, state, grads, probes, balance,
    damping)`."""
    kwargs = {"preconditioner_update_probability": 1.0, **kwargs}
    tx = psgd_kron.kron(
        LR, precond_update_precision="float32", precond_grads_precision="float32", **kwargs
    )

    @jax.jit
    def step(params, state, grads, probes, balance=False, damping=0.0):
        patches = _patched_psgd(jax.tree.leaves(probes), balance, damping, clip)
        with patches[0], patches[1], patches[2]:
            updates, state = tx.update(grads, state, params)
        return jax.tree.map(jnp.add, params, updates), state

    return tx, step


def _gradtx_step(clip=True, **kwargs):
    """gradtx's kron, the update every step, `_probes` giving the probes passed in."""
    kwargs = {"preconditioner_update_probability": 1.0, "balance_probability": 0.0, **kwargs}
    tx = kron(LR, **kwargs)

    @jax.jit
    def step(params, state, grads, probes):
        given = jax.tree.leaves(probes)

        def fixed(key, shapes):
            assert [tuple(v.shape) for v in given] == [tuple(s) for s in shapes]
            return given

        unclipped = mock.patch.object(_kron, "_rms_clipped", lambda u: u)
        with (
            mock.patch.object(_kron, "_probes", fixed),
            contextlib.nullcontext() if clip else unclipped,
        ):
            updates, state = tx.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state

    return tx, step


def _run(side, params, grads, probes, steps=STEPS, **switches):
    tx, step = side
    state = tx.init(params)
    for t in range(steps):
        at = {k: v[t] for k, v in grads.items()}, {k: v[t] for k, v in probes.items()}
        params, state = step(params, state, *at, **switches)
    return jax.tree.map(np.asarray, params), state


def _their_qs(state):
    return state[0]["Qs_preconditioners"]


def _our_qs(state):
    return state[0].qs


def _layout(qs):
    return {k: [tuple(np.shape(f)) for f in v] for k, v in qs.items()}


def _diff(x, y):
    """Max |x - y| over the leaves of two trees (the factors: tuples against lists)."""
    x, y = jax.tree.leaves(x), jax.tree.leaves(y)
    assert len(x) == len(y)
    return max(
        float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
        for a, b in zip(x, y, strict=True)
    )


# -- the deterministic part ---------------------------------------------------------------------

# name: (gradtx kwargs, psgd-jax kwargs, balance before every fit on both sides). Everything not
# named is either side's default (b1, preconditioner_lr, init scale, momentum into the fit, the
# clip), so the first configuration also checks that the defaults correspond.
CONFIGS = {
    "defaults_and_fallback": (
        {"max_size_triangular": MAX_SIZE},
        {"max_size_triangular": MAX_SIZE},
        False,
    ),
    # no momentum, fitted to the raw gradient, the largest axis of each matrix diagonal, the
    # factors balanced before every fit, initial scale 0.5, decay of every leaf (psgd-jax's
    # default mask, an explicit one for gradtx)
    "raw_one_diag_balanced_decay": (
        {"b1": 0.0, "momentum_into_preconditioner_update": False, "memory_save_mode": "one_diag",
         "preconditioner_init_scale": 0.5, "balance_probability": 1.0, "weight_decay": 0.1,
         "mask": lambda p: jax.tree.map(lambda _: True, p)},
        {"b1": 0.0, "momentum_into_precond_update": False, "memory_save_mode": "one_diag",
         "preconditioner_init_scale": 0.5, "weight_decay": 0.1},
        True,
    ),
}  # fmt: skip


@functools.cache
def _sides(name):
    """(gradtx side, psgd-jax side) of a configuration, each built and compiled once."""
    ours, theirs, _ = CONFIGS[name]
    return _gradtx_step(**ours), _psgd_step(**theirs)


def _compare(name, params, grads, probes, damping=0.0):
    """Both trajectories: (our params, their params, our factors, their factors). psgd-jax's
    switches are always passed (as arrays), so that damping on and off share one program."""
    ours, theirs = _sides(name)
    got, our_state = _run(ours, params, grads, probes)
    switches = {"balance": np.bool_(CONFIGS[name][2]), "damping": np.float32(damping)}
    want, their_state = _run(theirs, params, grads, probes, **switches)
    return got, want, _our_qs(our_state), _their_qs(their_state)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_psgd_jax_with_the_same_probes(name):
    params, grads, probes = _problem()
    got, want, q_ours, q_theirs = _compare(name, params, grads, probes)
    assert _layout(q_ours) == _layout(q_theirs)
    for k in params:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=TOL, err_msg=k)
        assert _diff(q_ours[k], q_theirs[k]) < TOL, k
    assert np.abs(got["a"] - params["a"]).max() > 0.1  # it moved
    # the preconditioner moved away from its initial scaled identity
    q = np.asarray(q_ours["a"][-1])
    assert np.abs(q - q[0, 0] * np.eye(6)).max() > 0.05


def test_factor_layout_is_psgd_jax_s():
    """Triangular (k, k) or diagonal (k,) factors, as psgd-jax lays them out, the fallback of
    `max_size_triangular` included; factors start at init_scale^(1/ndim) times I (or ones)."""
    params, _, _ = _problem()
    for name in CONFIGS:
        ours, theirs = _sides(name)
        q_ours, q_theirs = _our_qs(ours[0].init(params)), _their_qs(theirs[0].init(params))
        assert _layout(q_ours) == _layout(q_theirs), name
        assert _diff(q_ours, q_theirs) == 0, name
    q = _our_qs(_sides("defaults_and_fallback")[0][0].init(params))
    assert _layout(q) == {"a": [(8, 8), (6, 6)], "b": [(6,)], "c": [(4, 4), (10,)], "s": [()]}


def test_psgd_jax_damping_is_the_only_gap():
    """psgd-jax fits to `g + sqrt(eps) mean|g| V` (its damping, not the paper's rule, which
    gradtx follows): left in, it moves the trajectory a little, far less than the step."""
    params, grads, probes = _problem()
    got, want, q_ours, q_theirs = _compare("defaults_and_fallback", params, grads, probes,
                                           damping=1.0)  # fmt: skip
    gap = _diff(got, want)  # measured 9.8e-5 (Q: 1.2e-4)
    assert 5 * TOL < gap < 1e-3, gap
    assert _diff(q_ours, q_theirs) < 1e-3


def test_rank_one_constant_gradient_matches_without_damping():
    """The edge case of the damping: a constant rank-one gradient (a singular covariance, where
    psgd-jax's damping would regularise the fit). gradtx, fitting to the gradient itself, stays
    finite and equal to psgd-jax without damping."""
    params, _, probes = _problem()
    rng = np.random.default_rng(5)
    grads = {}
    for k, s in SHAPES.items():
        g = np.ones(()) if not s else functools.reduce(np.multiply.outer, map(rng.normal, s))
        grads[k] = np.broadcast_to(np.float32(g), (STEPS, *s))
    got, want, q_ours, q_theirs = _compare("defaults_and_fallback", params, grads, probes)
    assert all(np.isfinite(x).all() for x in jax.tree.leaves((got, q_ours)))
    assert _diff(got, want) < TOL and _diff(q_ours, q_theirs) < TOL
    got, want, _, _ = _compare("defaults_and_fallback", params, grads, probes, damping=1.0)
    assert _diff(got, want) > 5 * TOL  # measured 3.6e-4: damping matters here


def test_scanned_layers_are_batch_axes_up_to_the_clip():
    """psgd-jax's `scanned_layers` (vmap over axis 0) is gradtx's `batch_axes=0`, up to the RMS
    clip: psgd-jax clips the stacked leaf as a whole, gradtx each slice (as if each were its own
    parameter, like the fit), so the comparison turns both clips off."""
    params, grads, probes = _problem({"e": (3, 4, 5)}, seed=1)
    ours = _gradtx_step(clip=False, batch_axes=0)
    theirs = _psgd_step(clip=False, scanned_layers={"e": True})
    got, our_state = _run(ours, params, grads, probes)
    want, their_state = _run(theirs, params, grads, probes)
    assert _layout(_our_qs(our_state)) == {"e": [(3, 4, 4), (3, 5, 5)]}
    assert _diff(got, want) < TOL
    assert _diff(_our_qs(our_state), _their_qs(their_state)) < TOL
    assert np.abs(got["e"] - params["e"]).max() > 0.1


# -- the random parts and the defaults ----------------------------------------------------------


def test_default_schedule_is_psgd_jax_s():
    ours, theirs = precond_update_prob_schedule(), psgd_kron.precond_update_prob_schedule()
    n = np.concatenate([np.arange(0, 1200, 7), [499, 500, 501, 2000, 3000, 3999, 4000, 10**6]])
    got = np.asarray(jax.vmap(ours)(jnp.asarray(n)))
    want = np.asarray(jax.vmap(theirs)(jnp.asarray(n, jnp.float32)))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert got[0] == 1.0 and got[-1] == np.float32(0.03)
    # the default of both `preconditioner_update_probability`s is this schedule
    default = inspect.signature(psgd_kron.kron).parameters["preconditioner_update_probability"]
    np.testing.assert_allclose(np.asarray(jax.vmap(default.default)(n * 1.0)), want, rtol=1e-6)
    assert inspect.signature(kron).parameters["preconditioner_update_probability"].default is None


# gradtx's name: psgd-jax's name, for the hyperparameters both have
SAME_DEFAULTS = {
    "learning_rate": "learning_rate", "b1": "b1", "weight_decay": "weight_decay",
    "max_size_triangular": "max_size_triangular", "min_ndim_triangular": "min_ndim_triangular",
    "memory_save_mode": "memory_save_mode", "preconditioner_lr": "preconditioner_lr",
    "preconditioner_init_scale": "preconditioner_init_scale", "mu_dtype": "mu_dtype",
    "momentum_into_preconditioner_update": "momentum_into_precond_update",
}  # fmt: skip


def test_default_hyperparameters_correspond():
    ours = inspect.signature(kron).parameters
    theirs = inspect.signature(psgd_kron.kron).parameters
    for mine, their in SAME_DEFAULTS.items():
        assert ours[mine].default == theirs[their].default, mine
    # psgd-jax's precond_dtype None keeps its factors float32 (jnp.eye's default), gradtx's
    # default stores float32
    assert theirs["precond_dtype"].default is None and ours["preconditioner_dtype"].default is (
        jnp.float32
    )
    # psgd-jax balances with a fixed probability 0.01 per update, gradtx's default; the clip
    assert ours["balance_probability"].default == 0.01 and _kron_slice._RMS_CLIP == 1.1
    # gradtx has no skew rule by default (psgd-jax has none)
    assert ours["max_skew_triangular"].default == float("inf")
    # the weight-decay masks differ: psgd-jax (optax's mask None) decays every leaf, gradtx's
    # default only leaves of rank >= 2 (pytorch_optimizer's rule)
    assert theirs["weight_decay_mask"].default is None and ours["mask"].default is None
    assert _kron._rank_at_least_2({"w": np.ones((2, 3)), "b": np.ones(3), "s": 1.0}) == {
        "w": True, "b": False, "s": False
    }  # fmt: skip


def _updated_steps(side, qs_of, steps=8):
    """On which steps (1-based) a scalar leaf's factor changed (a fit always changes it)."""
    tx, step = side
    params = jnp.float32(1.0)
    state = tx.init(params)
    changed = []
    for t in range(1, steps + 1):
        before = np.asarray(jax.tree.leaves(qs_of(state))[0])
        params, state = step(params, state, jnp.float32(0.5), jnp.float32(1.3))
        if np.asarray(jax.tree.leaves(qs_of(state))[0]) != before:
            changed.append(t)
    return changed


def test_update_decision_and_schedule_argument_differ_as_documented():
    """psgd-jax 0.2.9 updates when a counter reaches 1/p, calling the schedule with the count
    after the increment (1 at the first step); gradtx draws Bernoulli(p) with the count before
    (0 at the first step). A schedule 1 at n = 0 only: gradtx updates at step 1, psgd-jax never;
    a constant 1/3: psgd-jax updates exactly every third step."""
    first_only = lambda n: jnp.where(n == 0, 1.0, 0.0)
    ours = _gradtx_step(preconditioner_update_probability=first_only)
    theirs = _psgd_step(preconditioner_update_probability=first_only)
    assert _updated_steps(ours, _our_qs) == [1]
    assert _updated_steps(theirs, _their_qs) == []
    third = _psgd_step(preconditioner_update_probability=1 / 3)
    assert _updated_steps(third, _their_qs, steps=9) == [3, 6, 9]
