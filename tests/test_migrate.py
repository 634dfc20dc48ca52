"""`gradtx.migrate`: a state built for another chain of the same optimizer, matched by role.

Each case runs an old chain and a new one (differing by a wrapper, a stateless transformation,
a schedule, a dtype) on the same quadratic, with a wrapper whose math is the identity on this
run (a clip that never clips, a spike threshold never reached, `accumulate_k_steps` on a
gradient that is constant within a cycle). The old state migrated to the new chain must equal
the new chain's own state on every carried value, and resuming must follow the new chain's run.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.checkpoint import _io as checkpoint_io
from gradtx.checkpoint import _roles
from gradtx.state._quantize import QuantizedArray, decode, encode

pytestmark = pytest.mark.across_versions  # the version lanes of `make test` run this file

PARAMS = {"dense": {"kernel": jnp.full((4, 3), 0.5), "bias": jnp.zeros(3)}, "scale": jnp.ones(2)}
TARGET = jax.tree.map(lambda p: jnp.linspace(-1.0, 1.0, p.size).reshape(p.shape), PARAMS)
LR = 0.05


def _grads(params):
    return jax.tree.map(lambda p, t: 2.0 * (p - t), params, TARGET)


def _run(tx, steps, params=PARAMS, state=None):
    state = tx.init(params) if state is None else state
    for _ in range(steps):
        updates, state = tx.update(_grads(params), state, params)
        params = gradtx.apply_updates(params, updates)
    return params, state


def _by_key(state):
    return {r.key: r.value for r in _roles.roles(state)}


def _adam():
    return gradtx.adam(LR)


# (id, old chain, new chain, micro-steps of the new chain per step of the old one)
CASES = [
    ("add-clip", _adam, lambda: gradtx.chain(gradtx.clip_by_global_norm(1e6), _adam()), 1),
    ("add-decay", _adam, lambda: gradtx.chain(gradtx.add_decayed_weights(0.0), _adam()), 1),
    ("accumulate", _adam, lambda: gradtx.accumulate_k_steps(_adam(), 2), 2),
    ("apply-if-finite", _adam, lambda: gradtx.apply_if_finite(_adam(), 3), 1),
    (
        "skip-on-spikes",
        _adam,
        lambda: gradtx.skip_on_spikes(_adam(), metric="grad_norm", threshold=1e6, warmup=2),
        1,
    ),
    ("ema-params", _adam, lambda: gradtx.chain(_adam(), gradtx.ema_params(0.9)), 1),
    ("lookahead", _adam, lambda: gradtx.lookahead(_adam(), 1000, 0.5), 1),
    ("inject", _adam, lambda: gradtx.inject_hyperparams(gradtx.adam)(learning_rate=LR), 1),
    ("masked", _adam, lambda: gradtx.masked(_adam(), jax.tree.map(lambda _: True, PARAMS)), 1),
    (
        "schedule",
        _adam,
        lambda: gradtx.adam(gradtx.schedules.constant_schedule(LR)),
        1,
    ),
    (
        "nested",
        lambda: gradtx.chain(gradtx.clip_by_global_norm(1e6), _adam()),
        lambda: gradtx.apply_if_finite(gradtx.accumulate_k_steps(_adam(), 2), 5),
        2,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_wrapping_and_unwrapping_carry_every_shared_role(case):
    _, make_old, make_new, k = case
    old_tx, new_tx = make_old(), make_new()
    old_params, old_state = _run(old_tx, 3)
    new_params, new_state = _run(new_tx, 3 * k)
    np.testing.assert_allclose(
        np.asarray(old_params["dense"]["kernel"]),
        np.asarray(new_params["dense"]["kernel"]),
        rtol=1e-6,
    )

    migrated, report = gradtx.migrate(old_state, new_tx, old_params)
    assert report.carried and not report.converted and not report.dropped
    ours, theirs = _by_key(migrated), _by_key(new_state)
    assert set(ours) == set(theirs)
    for _, key in report.carried:
        np.testing.assert_allclose(np.asarray(ours[key]), np.asarray(theirs[key]), rtol=1e-6)
    fresh = {key for key, _ in report.fresh}
    assert fresh == set(ours) - {key for _, key in report.carried}
    # resuming from the migrated state follows the new chain's own run
    resumed, _ = _run(new_tx, 2 * k, old_params, migrated)
    expected, _ = _run(new_tx, 2 * k, new_params, new_state)
    for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)

    # and back: unwrapping gives the old chain's state exactly, the wrapper's values dropped
    back, report_back = gradtx.migrate(migrated, old_tx, old_params)
    assert not report_back.fresh and len(report_back.dropped) == len(report.fresh)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(old_state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_multi_transform_matches_by_label_not_position():
    labels = {"dense": {"kernel": "a", "bias": "b"}, "scale": "b"}
    old_tx = gradtx.multi_transform(
        {"a": gradtx.adam(LR), "b": gradtx.sgd(LR, momentum=0.9)}, labels
    )
    new_tx = gradtx.chain(
        gradtx.clip_by_global_norm(1e6),
        gradtx.multi_transform({"b": gradtx.sgd(LR, momentum=0.9), "a": gradtx.adam(LR)}, labels),
    )
    _, old_state = _run(old_tx, 3)
    _, new_state = _run(new_tx, 3)
    migrated, report = gradtx.migrate(old_state, new_tx, PARAMS)
    assert report.complete
    for a, b in zip(jax.tree.leaves(migrated), jax.tree.leaves(new_state), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_dtype_changes_float32_bfloat16_and_8bit():
    _, state = _run(_adam(), 3)
    small = gradtx.adam(LR, mu_dtype=jnp.bfloat16, nu_dtype=gradtx.quantized(min_size=1))
    migrated, report = gradtx.migrate(state, small, PARAMS)
    notes = {new: what for _, new, what in report.converted}
    assert notes["0/mu/dense/kernel"] == "float32 -> bfloat16"
    assert notes["0/nu/dense/kernel"] == "float32 -> 8-bit"
    mu = migrated[0].mu["dense"]["kernel"]
    assert mu.dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        np.asarray(mu), np.asarray(state[0].mu["dense"]["kernel"].astype(jnp.bfloat16))
    )
    nu = migrated[0].nu["dense"]["kernel"]
    assert isinstance(nu, QuantizedArray)
    # back to float32: exact where float32 holds the value (every bfloat16 does)
    back, _ = gradtx.migrate(migrated, _adam(), PARAMS)
    np.testing.assert_array_equal(
        np.asarray(back[0].mu["dense"]["kernel"]), np.asarray(mu.astype(jnp.float32))
    )
    # the 8-bit moment decodes to what the codec makes of the float32 one, bit for bit
    want_nu = decode(encode(state[0].nu["dense"]["kernel"], block_size=nu.block_size, signed=False))
    np.testing.assert_array_equal(np.asarray(back[0].nu["dense"]["kernel"]), np.asarray(want_nu))
    # 8-bit to the same 8-bit code: the codes and scales, unchanged
    again, report_again = gradtx.migrate(migrated, small, PARAMS)
    assert not report_again.converted
    for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(migrated), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the migrated 8-bit state steps like one the small optimizer made
    _run(small, 1, state=migrated)


def test_from_a_file_without_the_old_optimizer(tmp_path):
    old_tx = gradtx.chain(gradtx.clip_by_global_norm(1e6), _adam())
    _, state = _run(old_tx, 3)
    path = gradtx.save(tmp_path / "old.safetensors", state)
    new_tx = gradtx.skip_on_spikes(_adam(), metric="grad_norm")
    migrated, report = gradtx.migrate(path, new_tx, PARAMS)
    direct, direct_report = gradtx.migrate(state, new_tx, PARAMS)
    assert report == direct_report
    for a, b in zip(jax.tree.leaves(migrated), jax.tree.leaves(direct), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # load(..., migrate=True) gives the same state
    loaded = gradtx.load(path, new_tx.init(PARAMS), migrate=True)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(direct), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_files_written_before_the_structure_was_recorded_need_old_tx(tmp_path, monkeypatch):
    old_tx = _adam()
    _, state = _run(old_tx, 2)
    write = checkpoint_io.write_file
    monkeypatch.setattr(
        "gradtx.checkpoint.write_file",
        lambda *a, structure=None, **kw: write(*a, **kw),
    )
    path = gradtx.save(tmp_path / "old.safetensors", state)
    monkeypatch.undo()
    new_tx = gradtx.apply_if_finite(old_tx, 2)
    with pytest.raises(gradtx.CheckpointError, match="old_tx="):
        gradtx.migrate(path, new_tx, PARAMS)
    migrated, report = gradtx.migrate(path, new_tx, PARAMS, old_tx=old_tx)
    assert len(report.carried) == len(jax.tree.leaves(state))
    flat = gradtx.state_dict(state)
    with pytest.raises(gradtx.CheckpointError, match="old_tx="):
        gradtx.migrate(flat, new_tx, PARAMS)
    from_flat, _ = gradtx.migrate(flat, new_tx, PARAMS, old_tx=old_tx)
    for a, b in zip(jax.tree.leaves(from_flat), jax.tree.leaves(migrated), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bad_migrations_name_the_path_and_role():
    _, state = _run(_adam(), 1)
    wider = {**PARAMS, "dense": {**PARAMS["dense"], "kernel": jnp.zeros((5, 3))}}
    with pytest.raises(
        gradtx.CheckpointError, match=r"ScaleByAdamState.mu\[dense/kernel\].*\[5, 3\].*\[4, 3\]"
    ):
        gradtx.migrate(state, _adam(), wider)
    renamed = {"layer": PARAMS["dense"], "gain": PARAMS["scale"]}
    with pytest.raises(gradtx.CheckpointError, match="no parameter path in common"):
        gradtx.migrate(state, _adam(), renamed)
    with pytest.raises(gradtx.CheckpointError, match=r"(?s)strict=True.*fresh"):
        gradtx.migrate(state, gradtx.apply_if_finite(_adam(), 2), PARAMS, strict=True)
    # two momentum states, one removed: which one stays is ambiguous, and it says so
    two = gradtx.chain(gradtx.trace(0.9), gradtx.trace(0.5))
    _, two_state = _run(two, 1)
    with pytest.raises(gradtx.CheckpointError, match=r"ambiguous.*named_chain"):
        gradtx.migrate(two_state, gradtx.trace(0.9), PARAMS)
    # a value migrate does not convert
    ints = gradtx.sgd(LR, momentum=0.9)
    _, ints_state = _run(ints, 1)
    bad = jax.tree.map(lambda x: x.astype(jnp.int32) if x.ndim else x, ints_state)
    with pytest.raises(gradtx.CheckpointError, match="not a conversion"):
        gradtx.migrate(bad, ints, PARAMS)


def test_named_chains_keep_their_names_as_labels():
    old_tx = gradtx.named_chain(("adam", gradtx.scale_by_adam()), ("lr", gradtx.scale(-LR)))
    new_tx = gradtx.named_chain(
        ("clip", gradtx.clip_by_global_norm(1e6)),
        ("adam", gradtx.scale_by_adam()),
        ("lr", gradtx.scale(-LR)),
    )
    _, state = _run(old_tx, 2)
    migrated, report = gradtx.migrate(state, new_tx, PARAMS)
    assert report.complete
    np.testing.assert_array_equal(
        np.asarray(migrated["adam"].mu["scale"]), np.asarray(state["adam"].mu["scale"])
    )
    other = gradtx.named_chain(("opt", gradtx.scale_by_adam()), ("lr", gradtx.scale(-LR)))
    _, report = gradtx.migrate(state, other, PARAMS)
    assert {role for _, role in report.fresh} >= {"opt:ScaleByAdamState.count"}


def test_cli_inspect_and_migrate(tmp_path, capsys):
    from gradtx.cli import main

    tx = gradtx.adamw(LR)
    _, state = _run(tx, 2)
    old = str(gradtx.save(tmp_path / "old.safetensors", state))
    assert main(["inspect", old]) == 0
    out = capsys.readouterr().out
    assert "ScaleByAdamState.mu[dense/kernel]" in out and "step: 2 (from '0/count')" in out
    config = tmp_path / "new.yaml"
    config.write_text(
        "optimizer: {name: adamw, learning_rate: 0.05}\nclip: {global_norm: 1.0}\n"
        "nonfinite: {action: skip, max_consecutive_errors: 3}\n"
    )
    new = str(tmp_path / "new.safetensors")
    assert main(["migrate", old, str(config), "-o", new]) == 0
    out = capsys.readouterr().out
    assert "fresh:" in out and "ApplyIfFiniteState.notfinite_count" in out and "wrote" in out
    want, _ = gradtx.migrate(state, gradtx.from_config(config), PARAMS)
    got = gradtx.load(new, want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # errors are one line naming the problem, exit status 2
    with pytest.raises(SystemExit):  # argparse: the old checkpoint is never overwritten
        main(["migrate", old, str(config), "-o", old])
    capsys.readouterr()
    assert main(["migrate", old, str(config), "-o", new, "--strict"]) == 2
    assert "strict=True" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "missing.safetensors")]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["npz", "gradtx"])
def test_cli_migrate_takes_the_parameters_from_a_file(tmp_path, capsys, fmt):
    """`--params` (an .npz keyed by '/'-joined paths, or a `gradtx.save` file of the params) is
    read back into the parameter tree: the result equals `gradtx.migrate` with those params."""
    from gradtx.cli import main

    params, state = _run(gradtx.adamw(LR), 2)
    old = str(gradtx.save(tmp_path / "old.safetensors", state))
    if fmt == "npz":
        path = tmp_path / "params.npz"
        np.savez(path, **{k: np.asarray(v) for k, v in gradtx.state_dict(params).items()})
    else:
        path = gradtx.save(tmp_path / "params.safetensors", params)
    config = tmp_path / "new.yaml"
    config.write_text("optimizer: {name: adamw, learning_rate: 0.05}\nema: {decay: 0.9}\n")
    new = str(tmp_path / "new.safetensors")
    assert main(["migrate", old, str(config), "-o", new, "--params", str(path)]) == 0
    assert "shapes read from the old state" not in capsys.readouterr().out
    want, _ = gradtx.migrate(state, gradtx.from_config(config), params)
    got = gradtx.load(new, want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_swapped_stateful_links_carry_each_state_to_its_link():
    """Two stateful transformations of distinct classes that change places: each state goes
    to its own transformation (matched by class, not by position); same-class states keep
    their order among themselves."""
    old_tx = gradtx.chain(gradtx.trace(0.5), gradtx.scale_by_adam(), gradtx.scale(-LR))
    new_tx = gradtx.chain(gradtx.scale_by_adam(), gradtx.trace(0.5), gradtx.scale(-LR))
    _, state = _run(old_tx, 3)
    migrated, report = gradtx.migrate(state, new_tx, PARAMS)
    assert report.complete
    for a, b in zip(jax.tree.leaves(migrated[0]), jax.tree.leaves(state[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(jax.tree.leaves(migrated[1]), jax.tree.leaves(state[0]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # a second trace: the two traces keep their order, the adam state moves to its place
    old_tx = gradtx.chain(gradtx.trace(0.9), gradtx.scale_by_adam(), gradtx.trace(0.5))
    new_tx = gradtx.chain(gradtx.scale_by_adam(), gradtx.trace(0.9), gradtx.trace(0.5))
    _, state = _run(old_tx, 3)
    migrated, report = gradtx.migrate(state, new_tx, PARAMS)
    assert report.complete
    for new, old in ((0, 1), (1, 0), (2, 2)):
        for a, b in zip(jax.tree.leaves(migrated[new]), jax.tree.leaves(state[old]), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # two traces for one: the one on the same side of the adam state as the new trace
    migrated, report = gradtx.migrate(
        state, gradtx.chain(gradtx.trace(0.9), gradtx.scale_by_adam()), PARAMS
    )
    assert {path.split("/")[0] for path, _ in report.dropped} == {"2"}  # the last trace
    for a, b in zip(jax.tree.leaves(migrated), jax.tree.leaves(state[:2]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # where the position does not tell which trace stays: refused, naming the traces
    two = gradtx.chain(gradtx.trace(0.9), gradtx.trace(0.5), gradtx.scale_by_adam())
    _, state = _run(two, 1)
    with pytest.raises(
        gradtx.CheckpointError,
        match=r"holds 2 TraceState states \(\['0', '1'\]\), the new optimizer 1.*ambiguous",
    ):
        gradtx.migrate(state, gradtx.chain(gradtx.trace(0.9), gradtx.scale_by_adam()), PARAMS)


# -- refusals and the step of a wrapped run ----------------------------------------------------


def test_colliding_parameter_paths_are_refused_naming_both():
    """`{"a/b": x, "a": {"b": y}}` gives two parameters the path 'a/b': matching by path would
    carry one parameter's moments onto the other, so migrate refuses as state_dict does."""
    params = {"a/b": jnp.ones(2), "a": {"b": jnp.full(2, 2.0)}}
    tx = gradtx.adam(LR)
    state = tx.init(params)
    _, state = tx.update(params, state, params)
    with pytest.raises(gradtx.CheckpointError) as info:
        gradtx.migrate(state, gradtx.adam(LR), params)
    message = str(info.value)
    assert message.startswith("migrate: two leaves have the path '0/mu/a/b'")
    assert "[0].mu['a/b']" in message and "[0].mu['a']['b']" in message
    with pytest.raises(gradtx.CheckpointError, match=r"^state_dict: two leaves have the path"):
        gradtx.state_dict(state)


def test_the_old_state_and_the_params_must_be_given():
    state = _adam().init(PARAMS)
    with pytest.raises(gradtx.CheckpointError, match=r"state_or_path is None.*gradtx\.save"):
        gradtx.migrate(None, _adam(), PARAMS)
    with pytest.raises(gradtx.CheckpointError, match=r"params is None.*ShapeDtypeStruct"):
        gradtx.migrate(state, _adam(), None)


def test_a_new_wrapper_goes_on_from_the_runs_step(tmp_path, capsys):
    """docs/moving-state.md's example: adamw at step 3, then accumulate_k_steps(skip_on_spikes(
    chain(clip, adamw))). The wrappers' counts of the run's steps start at 3, so `metrics`,
    `inspect_state` and `gradtx inspect` report step 3, as the new chain's own run would."""
    from gradtx.cli import main

    tx = gradtx.adamw(1e-3)
    _, state = _run(tx, 3)
    tx_new = gradtx.accumulate_k_steps(
        gradtx.skip_on_spikes(gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(1e-3))),
        4,
    )
    state_new, report = gradtx.migrate(state, tx_new, PARAMS)
    assert int(gradtx.metrics(tx_new, state_new)["step"]) == 3
    assert gradtx.inspect_state(state_new).step == 3
    assert state_new.gradient_step == 3 and state_new.inner_state.count == 3
    assert state_new.micro_step == 0 and state_new.inner_state.filled == 0  # a new cycle, window
    assert dict(report.continued) == {"gradient_step": 3, "inner_state/count": 3}
    assert "gradient_step (AccumulateState.gradient_step): 3, the run's step" in str(report)
    path = gradtx.save(tmp_path / "new.safetensors", state_new)
    assert main(["inspect", str(path)]) == 0
    assert "step: 3 (from 'gradient_step')" in capsys.readouterr().out
    # a schedule driven by a new inject_hyperparams goes on from the run's step too
    schedule = gradtx.schedules.linear_schedule(LR, 0.0, 10)
    _, state = _run(gradtx.adam(schedule), 3)
    injected = gradtx.inject_hyperparams(gradtx.adam)(learning_rate=schedule)
    migrated, _ = gradtx.migrate(state, injected, PARAMS)
    _, own = _run(injected, 3)
    assert int(migrated.count) == int(own.count) == 3
    _, resumed = _run(injected, 1, PARAMS, migrated)  # the 4th step uses the rate of step 3
    lr = gradtx.metrics(injected, resumed)["learning_rate"]
    np.testing.assert_allclose(float(lr), float(schedule(3)), rtol=1e-6)


def test_cli_migrate_into_a_missing_folder_names_the_folder(tmp_path, capsys):
    from gradtx.cli import main

    _, state = _run(gradtx.adamw(LR), 1)
    old = str(gradtx.save(tmp_path / "old.safetensors", state))
    config = tmp_path / "new.yaml"
    config.write_text("optimizer: {name: adamw, learning_rate: 0.05}\n")
    missing = tmp_path / "missing_dir"
    assert main(["migrate", old, str(config), "-o", str(missing / "x.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the folder {str(missing)!r} does not exist" in err
    assert ".tmp-" not in err
    with pytest.raises(FileNotFoundError, match=r"the folder .*missing_dir' does not exist"):
        gradtx.save(missing / "y.safetensors", state)
