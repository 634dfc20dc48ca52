"""torch.optim state dicts -> gradtx: a converted torch run continues as torch continues it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.checkpoint._format import CheckpointError
from gradtx.checkpoint._torch import from_torch_state_dict, to_torch_state_dict, torch_names

torch = pytest.importorskip("torch")

WARM, STEPS = 10, 100
_X = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
_Y = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def _loss_torch(model) -> torch.Tensor:
    return ((model(torch.from_numpy(_X)) - torch.from_numpy(_Y)) ** 2).mean()


def _loss_jax(p):
    h = jnp.tanh(_X @ p["0"]["kernel"] + p["0"]["bias"])
    return jnp.mean((h @ p["2"]["kernel"] + p["2"]["bias"] - _Y) ** 2)


def _params(model) -> dict:
    sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return {
        i: {"kernel": jnp.asarray(sd[f"{i}.weight"].T), "bias": jnp.asarray(sd[f"{i}.bias"])}
        for i in ("0", "2")
    }


def _adafactor_lr(lr):
    return lambda k: jnp.minimum(lr, 1.0 / jnp.sqrt(jnp.asarray(k, jnp.float32) + 1.0))


# (name, torch optimizer, gradtx optimizer); hyperparameters as the module docstring maps them
CASES = [
    ("adam", lambda p: torch.optim.Adam(p, lr=1e-2), lambda: gradtx.adam(1e-2)),
    (
        "adamw",
        lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
        lambda: gradtx.adamw(1e-2, weight_decay=0.1),
    ),
    (
        "sgd_momentum",
        lambda p: torch.optim.SGD(p, lr=5e-2, momentum=0.9),
        lambda: gradtx.sgd(5e-2, momentum=0.9),
    ),
    (
        "sgd_nesterov",
        lambda p: torch.optim.SGD(p, lr=5e-2, momentum=0.9, nesterov=True),
        lambda: gradtx.sgd(5e-2, momentum=0.9, nesterov=True),
    ),
    (
        "rmsprop",
        lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.9, eps=1e-6),
        lambda: gradtx.rmsprop(1e-3, decay=0.9, eps=1e-6, eps_in_sqrt=False),
    ),
    (
        "rmsprop_momentum",
        lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.9, eps=1e-6, momentum=0.9),
        lambda: gradtx.rmsprop(1e-3, decay=0.9, eps=1e-6, eps_in_sqrt=False, momentum=0.9),
    ),
    (
        "rmsprop_centered",
        lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.9, eps=1e-6, centered=True),
        lambda: gradtx.rmsprop(1e-3, decay=0.9, eps=1e-6, eps_in_sqrt=False, centered=True),
    ),
    (
        "rmsprop_centered_momentum",
        lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.9, eps=1e-6, centered=True, momentum=0.5),
        lambda: gradtx.rmsprop(
            1e-3, decay=0.9, eps=1e-6, eps_in_sqrt=False, centered=True, momentum=0.5
        ),
    ),
    (
        "adagrad",
        lambda p: torch.optim.Adagrad(p, lr=5e-2, initial_accumulator_value=0.1, eps=1e-10),
        lambda: gradtx.adagrad(5e-2, initial_accumulator_value=0.1, eps=1e-10, eps_in_sqrt=False),
    ),
    (
        "adafactor",
        lambda p: torch.optim.Adafactor(p, lr=1e-2),
        lambda: gradtx.adafactor(_adafactor_lr(1e-2), min_dim_size_to_factor=1),
    ),
]


def _torch_run(make_opt, extra: int):
    """torch: WARM steps, the state dict then, and `extra` more steps."""
    model = _model()
    opt = make_opt(model.parameters())

    def step():
        opt.zero_grad()
        _loss_torch(model).backward()
        opt.step()

    for _ in range(WARM):
        step()
    snapshot = opt.state_dict()
    snapshot = {
        "state": {
            k: {n: v.clone() if torch.is_tensor(v) else v for n, v in s.items()}
            for k, s in snapshot["state"].items()
        },
        "param_groups": snapshot["param_groups"],
    }
    start = _params(model)
    for _ in range(extra):
        step()
    return model, opt, snapshot, start


def _gradtx_run(tx, params, state, n: int):
    def body(carry, _):
        p, s = carry
        g = jax.grad(_loss_jax)(p)
        u, s = tx.update(g, s, p)
        return (gradtx.apply_updates(p, u), s), None

    run = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), None, length=n)[0])
    return run(params, state)


@pytest.mark.parametrize(("name", "make_torch", "make_tx"), CASES, ids=[c[0] for c in CASES])
def test_torch_run_continues_in_gradtx(name, make_torch, make_tx):
    model, _, snapshot, start = _torch_run(make_torch, STEPS)
    tx = make_tx()
    state, report = from_torch_state_dict(
        snapshot, tx, start, names=torch_names(model), transpose=True
    )
    assert report.carried and not report.dropped
    params, _ = _gradtx_run(tx, start, state, STEPS)
    want = _params(model)
    diff = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True)
    )
    moved = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(jax.tree.leaves(start), jax.tree.leaves(want), strict=True)
    )
    print(f"{name}: max |gradtx - torch| after {STEPS} steps = {diff:.2e} (moved {moved:.2e})")
    assert moved > 1e-3  # the continuation goes somewhere
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5)


def test_fresh_state_would_not_continue():
    """The converted moments matter: gradtx from a fresh state leaves torch's trajectory."""
    model, _, _, start = _torch_run(CASES[0][1], 20)
    tx = gradtx.adam(1e-2)
    params, _ = _gradtx_run(tx, start, tx.init(start), 20)
    want = _params(model)
    diff = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True)
    )
    assert diff > 1e-4


@pytest.mark.parametrize(("name", "make_torch", "make_tx"), CASES, ids=[c[0] for c in CASES])
def test_round_trip_is_exact(name, make_torch, make_tx):
    """gradtx -> torch -> gradtx gives the same state, and torch loads the dict."""
    model, opt, snapshot, start = _torch_run(make_torch, 0)
    tx, names = make_tx(), torch_names(model)
    sgd = name.startswith("sgd")  # torch's SGD keeps no step count: give it
    state, _ = from_torch_state_dict(
        snapshot, tx, start, names=names, transpose=True, step=WARM if sgd else None
    )
    state = _gradtx_run(tx, start, state, 3)[1]
    sd = to_torch_state_dict(
        state, tx, start, names=names, transpose=True, param_groups=snapshot["param_groups"]
    )
    opt.load_state_dict(sd)
    step = WARM + 3 if sgd else None
    back, _ = from_torch_state_dict(
        opt.state_dict(), tx, start, names=names, transpose=True, step=step
    )
    leaves = jax.tree_util.tree_leaves_with_path(state)
    for (path, a), b in zip(leaves, jax.tree.leaves(back), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype
        if name.startswith("rmsprop") and "trace" in jax.tree_util.keystr(path):
            # RMSprop's buffer is gradtx's trace / -lr, rescaled in float32: for an lr that is
            # not a power of two no float32 map is one-to-one, so an entry may move by one ulp
            np.testing.assert_array_max_ulp(a, b, maxulp=1)
        else:
            np.testing.assert_array_equal(a, b)


def test_names_as_dict_callable_and_param_names():
    model, _, snapshot, start = _torch_run(CASES[0][1], 0)
    tx = gradtx.adam(1e-2)
    listed, _ = from_torch_state_dict(snapshot, tx, start, names=torch_names(model), transpose=True)
    by_index = dict(enumerate(torch_names(model)))
    as_dict, _ = from_torch_state_dict(snapshot, tx, start, names=by_index, transpose=True)
    as_fn, _ = from_torch_state_dict(snapshot, tx, start, names=by_index.get, transpose=True)
    # an optimizer built from named_parameters() records torch's names in its param_groups
    named = torch.optim.Adam(model.named_parameters(), lr=1e-2)
    _loss_torch(model).backward()
    named.step()
    sd = named.state_dict()
    flax = dict(zip([n for n, _ in model.named_parameters()], torch_names(model), strict=True))
    by_name, _ = from_torch_state_dict(sd, tx, _params(model), names=flax, transpose=True)
    for a, b, c in zip(*map(jax.tree.leaves, (listed, as_dict, as_fn)), strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert int(by_name[0].count) == 1
    assert torch_names(model) == ["0/kernel", "0/bias", "2/kernel", "2/bias"]
    assert torch_names(model, convention="torch")[0] == "0/weight"


def test_errors_name_the_problem():
    model, _, snapshot, start = _torch_run(CASES[0][1], 0)
    tx, names = gradtx.adam(1e-2), torch_names(model)
    with pytest.raises(CheckpointError, match=r"'0/kernal'.*did you mean '0/kernel'"):
        from_torch_state_dict(snapshot, tx, start, names=["0/kernal", *names[1:]], transpose=True)
    with pytest.raises(CheckpointError, match=r"shape \[5, 4\].*pass transpose=True"):
        from_torch_state_dict(snapshot, tx, start, names=names)
    with pytest.raises(CheckpointError, match="names lists 2 parameters"):
        from_torch_state_dict(snapshot, tx, start, names=names[:2], transpose=True)
    odd = {"state": {0: {**snapshot["state"][0], "exp_inf": np.zeros(3)}}, "param_groups": []}
    with pytest.raises(CheckpointError, match=r"'exp_inf'.*no counterpart"):
        from_torch_state_dict(odd, tx, start, names=names, transpose=True)
    with pytest.raises(CheckpointError, match=r"ScaleByAdamState.*build tx"):
        from_torch_state_dict(snapshot, gradtx.sgd(0.1, 0.9), start, names=names, transpose=True)
    uneven = {"state": dict(snapshot["state"]), "param_groups": snapshot["param_groups"]}
    uneven["state"][1] = {**uneven["state"][1], "step": torch.tensor(3.0)}
    with pytest.raises(CheckpointError, match="different step counts"):
        from_torch_state_dict(uneven, tx, start, names=names, transpose=True)
    with pytest.raises(CheckpointError, match="state_dict"):
        from_torch_state_dict({"0": 1}, tx, start, names=names)


def test_amsgrad_is_refused_with_the_reason():
    model, _, snapshot, start = _torch_run(lambda p: torch.optim.Adam(p, amsgrad=True), 0)
    with pytest.raises(CheckpointError, match=r"max_exp_avg_sq.*AMSGrad"):
        from_torch_state_dict(
            snapshot, gradtx.adam(1e-3), start, names=torch_names(model), transpose=True
        )


def test_adafactor_needs_factoring_like_torch():
    model, _, snapshot, start = _torch_run(CASES[-1][1], 0)
    with pytest.raises(CheckpointError, match="min_dim_size_to_factor=1"):
        from_torch_state_dict(
            snapshot, gradtx.adafactor(1e-2), start, names=torch_names(model), transpose=True
        )


def test_strict_refuses_a_state_torch_does_not_fill():
    model, _, snapshot, start = _torch_run(CASES[2][1], 0)  # SGD: momentum only
    tx = gradtx.chain(gradtx.scale_by_adam(), gradtx.sgd(0.1, momentum=0.9))
    names = torch_names(model)
    with pytest.raises(CheckpointError, match="do not correspond"):
        from_torch_state_dict(snapshot, tx, start, names=names, transpose=True, step=10)
    state, report = from_torch_state_dict(
        snapshot, tx, start, names=names, transpose=True, step=10, strict=False
    )
    assert report.fresh and int(state[1][1].count) == 10


def test_converted_state_owns_its_memory():
    """torch steps in place: a state converted before must not change with it (torch tensors
    and NumPy arrays in the state dict alike)."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step():
        opt.zero_grad()
        _loss_torch(model).backward()
        opt.step()

    step()
    tx, names, start = gradtx.adam(1e-2), torch_names(model), _params(model)
    state, _ = from_torch_state_dict(opt.state_dict(), tx, start, names=names, transpose=True)
    as_numpy = {
        "state": {
            i: {k: v.numpy() for k, v in entries.items()}
            for i, entries in opt.state_dict()["state"].items()
        },
        "param_groups": opt.state_dict()["param_groups"],
    }
    from_numpy, _ = from_torch_state_dict(as_numpy, tx, start, names=names, transpose=True)
    kept = [np.array(x, copy=True) for x in jax.tree.leaves((state, from_numpy))]
    step()  # in place: exp_avg, exp_avg_sq and step, and the NumPy views of them, change
    assert float(opt.state_dict()["state"][1]["step"]) == 2.0
    for before, now in zip(kept, jax.tree.leaves((state, from_numpy)), strict=True):
        np.testing.assert_array_equal(np.asarray(now), before)


_LOW = [  # (torch dtype name, NumPy / ml_dtypes dtype): the float formats both libraries have
    ("bfloat16", jnp.bfloat16),
    ("float8_e4m3fn", jnp.float8_e4m3fn),
    ("float8_e5m2", jnp.float8_e5m2),
]


@pytest.mark.parametrize(("torch_dtype", "dtype"), _LOW, ids=[n for n, _ in _LOW])
def test_low_precision_states_round_trip_exactly(torch_dtype, dtype):
    """A bf16 / float8 gradtx state goes to torch tensors of the same dtype, bit for bit, and
    back; torch's own bf16 Adam state converts and comes back unchanged too."""
    model = _model()
    start, names = _params(model), torch_names(model)
    tx = gradtx.adam(1e-2, mu_dtype=dtype, nu_dtype=dtype)
    ran = _gradtx_run(gradtx.adam(1e-2), start, gradtx.adam(1e-2).init(start), 5)[1]
    state = jax.tree.map(lambda x: x.astype(dtype) if x.ndim else x, ran)  # the moments
    sd = to_torch_state_dict(state, tx, start, names=names, transpose=True)
    assert sd["state"][0]["exp_avg"].dtype == getattr(torch, torch_dtype)
    back, _ = from_torch_state_dict(sd, tx, start, names=names, transpose=True)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(back), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a).tobytes(), np.asarray(b).tobytes())
    if torch_dtype != "bfloat16":
        return
    # torch's Adam on a bf16 model keeps bf16 moments: into gradtx and back to torch, exactly
    model = model.to(torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.from_numpy(_X).to(torch.bfloat16)).pow(2).mean().backward()
        opt.step()
    theirs = opt.state_dict()
    params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), start)
    state, _ = from_torch_state_dict(theirs, tx, params, names=names, transpose=True)
    sd = to_torch_state_dict(
        state, tx, params, names=names, transpose=True, param_groups=theirs["param_groups"]
    )
    for index, entries in theirs["state"].items():
        for key, value in entries.items():
            assert sd["state"][index][key].dtype == value.dtype
            assert torch.equal(sd["state"][index][key], value), (index, key)
    opt.load_state_dict(sd)


def test_a_dtype_the_other_side_lacks_is_refused_naming_it():
    """A float format torch lacks (to torch) or NumPy cannot hold (from torch): a
    CheckpointError naming the value and its dtype."""
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("torch < 2.8 has no float4_e2m1fn_x2")
    model = _model()
    start, names = _params(model), torch_names(model)
    tx = gradtx.adam(1e-2)
    odd = jax.tree.map(lambda x: x.astype(jnp.float8_e4m3b11fnuz) if x.ndim else x, tx.init(start))
    with pytest.raises(CheckpointError, match=r"ScaleByAdamState.mu\[0/bias\].*float8_e4m3b11fnuz"):
        to_torch_state_dict(odd, tx, start, names=names, transpose=True)
    sd = to_torch_state_dict(tx.init(start), tx, start, names=names, transpose=True)
    packed = torch.zeros(5, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)  # no NumPy dtype
    sd["state"][1]["exp_avg"] = packed
    with pytest.raises(CheckpointError, match=r"state\[1\]\['exp_avg'\].*float4_e2m1fn_x2"):
        from_torch_state_dict(sd, tx, start, names=names, transpose=True)
