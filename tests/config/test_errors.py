"""Bad configs: each gives the documented message, naming the config path (docs/config.md,
"Errors"); generated configs never raise anything but `ConfigError`."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradtx
from gradtx import config as gc
from gradtx.nnabla import from_nnabla
from gradtx.returnn import from_returnn

from .shared import LINEAR, SGD, config_error

ADAM = {"name": "adam", "learning_rate": 1e-3}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _no_lr() -> gradtx.GradientTransformation:
    """A solver without a learning rate (for the decoupled-decay case)."""
    return gradtx.scale_by_sign()


gc.register("test_no_learning_rate", _no_lr)


def opt(**kw):
    return {"optimizer": {**ADAM, **kw}}


# (id, config, regex the message must match)
CASES = [
    (
        "unknown-section",
        {**opt(), "clipping": {"norm": 1}},
        r"^clipping: unknown section 'clipping' \(did you mean 'clip'\?\)",
    ),
    (
        "missing-optimizer",
        {"clip": {"global_norm": 1.0}},
        r"^optimizer: missing the optimizer section",
    ),
    (
        "optimizer-not-a-block",
        {"optimizer": "adam"},
        r"^optimizer: must be an optimizer block \{name: \.\.\., \.\.\.\}, got 'adam'",
    ),
    (
        "missing-solver-name",
        {"optimizer": {"learning_rate": 0.1}},
        r"^optimizer\.name: missing the solver name",
    ),
    (
        "unknown-solver",
        {"optimizer": {"name": "adamm", "learning_rate": 0.1}},
        r"^optimizer\.name: unknown solver 'adamm' \(did you mean 'adam'",
    ),
    (
        "solver-name-not-a-string",
        {"optimizer": {"name": 3}},
        r"^optimizer\.name: the solver name must be a string, got 3",
    ),
    (
        "unknown-hyperparameter",
        opt(beta1=0.9),
        r"^optimizer\.beta1: adam has no hyperparameter 'beta1' \(did you mean 'b1'\?\)",
    ),
    (
        "missing-required",
        {"optimizer": {"name": "adam"}},
        r"^optimizer\.learning_rate: missing: adam requires 'learning_rate'",
    ),
    ("out-of-range", opt(b1=1.5), r"^optimizer\.b1: must be in \[0\.0, 1\.0\), got 1\.5"),
    ("not-a-number", opt(b1="high"), r"^optimizer\.b1: must be a number, got 'high'"),
    ("bool-for-number", opt(eps=True), r"^optimizer\.eps: must be a number, got True"),
    (
        "not-a-bool",
        {"optimizer": {"name": "sgd", "learning_rate": 0.1, "nesterov": "yes"}},
        r"^optimizer\.nesterov: must be true or false, got 'yes'",
    ),
    (
        "negative-learning-rate",
        opt(learning_rate=-1.0),
        r"^optimizer\.learning_rate: must be (finite and )?>= 0, got -1\.0",
    ),
    (
        "learning-rate-list",
        opt(learning_rate=[0.1, 0.2]),
        r"^optimizer\.learning_rate: must be a number or a schedule block",
    ),
    (
        "unknown-schedule",
        opt(learning_rate={"name": "cosine_decy", "init_value": 0.1}),
        r"^optimizer\.learning_rate\.name: unknown schedule 'cosine_decy' \(did you mean "
        r"'cosine_decay'",
    ),
    (
        "schedule-missing-argument",
        opt(learning_rate={"name": "cosine_decay", "init_value": 0.1}),
        r"^optimizer\.learning_rate\.decay_steps: missing: cosine_decay requires 'decay_steps'",
    ),
    (
        "schedule-non-integer-steps",
        opt(learning_rate={"name": "cosine_decay", "init_value": 0.1, "decay_steps": 10.5}),
        r"^optimizer\.learning_rate\.decay_steps: must be an integer, got 10\.5",
    ),
    (
        "schedule-warmup-twice",
        opt(
            learning_rate={
                "name": "warmup_cosine_decay",
                "init_value": 0.0,
                "peak_value": 0.1,
                "warmup_steps": 10,
                "decay_steps": 100,
                "warmup": {"steps": 5},
            }
        ),
        r"^optimizer\.learning_rate\.warmup: contradictory: warmup_cosine_decay has its own",
    ),
    (
        "warmup-unknown-key",
        opt(learning_rate={"name": "constant", "value": 0.1, "warmup": {"stepz": 5}}),
        r"^optimizer\.learning_rate\.warmup\.stepz: unknown key 'stepz' \(did you mean 'steps'",
    ),
    (
        "warmup-missing-steps",
        opt(learning_rate={"name": "constant", "value": 0.1, "warmup": {"init_value": 0.0}}),
        r"^optimizer\.learning_rate\.warmup\.steps: missing",
    ),
    (
        "weight-decay-missing-mode",
        {**opt(), "weight_decay": {"rate": 1e-4}},
        r"^weight_decay\.mode: missing",
    ),
    (
        "weight-decay-bad-mode",
        {**opt(), "weight_decay": {"rate": 1e-4, "mode": "decouple"}},
        r"^weight_decay\.mode: must be 'coupled' .* \(did you mean 'decoupled'",
    ),
    (
        "weight-decay-twice",
        {
            "optimizer": {"name": "adamw", "learning_rate": 1e-3},
            "weight_decay": {"rate": 1e-4, "mode": "decoupled"},
        },
        r"^weight_decay: contradictory: the solver adamw decays weights itself",
    ),
    (
        "weight-decay-negative",
        {**opt(), "weight_decay": {"rate": -0.1, "mode": "coupled"}},
        r"^weight_decay\.rate: must be (finite and )?>= 0, got -0\.1",
    ),
    (
        "decoupled-without-learning-rate",
        {
            "optimizer": {"name": "test_no_learning_rate"},
            "weight_decay": {"rate": 0.1, "mode": "decoupled"},
        },
        r"^weight_decay\.mode: mode 'decoupled' scales the decay by the learning rate",
    ),
    (
        "weight-decay-bad-mask",
        {**opt(), "weight_decay": {"rate": 0.1, "mode": "coupled", "mask": 3}},
        r"^weight_decay\.mask: must be a glob pattern or a list of patterns",
    ),
    ("clip-empty", {**opt(), "clip": {}}, r"^clip: give at least one of value, norm, global_norm"),
    (
        "clip-negative",
        {**opt(), "clip": {"global_norm": -1.0}},
        r"^clip\.global_norm: must be > 0, got -1\.0",
    ),
    (
        "clip-unknown-key",
        {**opt(), "clip": {"max_norm": 1.0}},
        r"^clip\.max_norm: unknown key 'max_norm'",
    ),
    (
        "nonfinite-bad-action",
        {**opt(), "nonfinite": "drop"},
        r"^nonfinite\.action: must be 'zero' .* or 'skip'",
    ),
    (
        "nonfinite-skip-without-limit",
        {**opt(), "nonfinite": "skip"},
        r"^nonfinite\.max_consecutive_errors: missing: action 'skip' needs it",
    ),
    (
        "nonfinite-zero-with-limit",
        {**opt(), "nonfinite": {"action": "zero", "max_consecutive_errors": 3}},
        r"^nonfinite\.max_consecutive_errors: contradictory: only action 'skip' takes it",
    ),
    (
        "accumulate-k-zero",
        {**opt(), "accumulate": {"k": 0}},
        r"^accumulate\.k: must be >= 1, got 0",
    ),
    (
        "accumulate-not-a-mapping",
        {**opt(), "accumulate": 4},
        r"^accumulate: must be a mapping \{k: \.\.\.\}, got 4",
    ),
    (
        "ema-decay-out-of-range",
        {**opt(), "ema": {"decay": 1.5}},
        r"^ema\.decay: must be in \[0\.0, 1\.0\), got 1\.5",
    ),
    (
        "lr-multipliers-missing-rules",
        {**opt(), "lr_multipliers": {"default": 1.0}},
        r"^lr_multipliers\.rules: missing",
    ),
    (
        "lr-multipliers-not-a-number",
        {**opt(), "lr_multipliers": {"rules": {"a/**": "x"}}},
        r"^lr_multipliers\.rules\['a/\*\*'\]: must be a number, got 'x'",
    ),
    (
        "bad-dtype",
        opt(mu_dtype="float33"),
        r"^optimizer\.mu_dtype: must be a dtype name such as 'float32' or 'bfloat16', got "
        r"'float33'",
    ),
    (
        "nested-optimizer-not-a-block",
        {"optimizer": {"name": "contrib.mechanize", "base_optimizer": "sgd"}},
        r"^optimizer\.base_optimizer: must be an optimizer block",
    ),
    ("noise-missing-eta", {**opt(), "noise": {"gamma": 0.5}}, r"^noise\.eta: missing"),
    ("yaml-syntax-string", "optimizer: {name: adam\n", r"^<string>:2:1: invalid YAML"),
    ("json-syntax-string", '{"optimizer": {"name": "adam",}}', r"^<string>:1:31: invalid JSON"),
    (
        "not-a-mapping",
        "- adam\n- sgd\n",
        r"^<string>: the config must be a mapping of sections, got a list",
    ),
    ("empty", "", r"^<string>: the config must be a mapping of sections, got empty"),
    ("wrong-source-type", 42, r"^a config must be a dict, a YAML / JSON file path"),
    ("file-not-found", "no/such/config.yaml", r"^config file not found: 'no/such/config\.yaml'"),
]


@pytest.mark.parametrize(("case", "config", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_config_gives_the_documented_message(case, config, expected):
    with pytest.raises(gc.ConfigError) as info:
        gc.from_config(config)
    assert re.search(expected, str(info.value)), f"{case}: {info.value}"


def test_the_table_has_at_least_30_cases_and_each_kind_is_documented():
    assert len(CASES) >= 30
    docs = DOCS.read_text()
    for phrase in (
        "unknown section",
        "missing the optimizer section",
        "unknown solver",
        "has no hyperparameter",
        "missing:",
        "must be a number",
        "must be in",
        "unknown schedule",
        "contradictory:",
        "must be true or false",
        "must be an integer",
        "invalid YAML",
        "invalid JSON",
        "file not found",
        "must be a mapping of sections",
        "did you mean",
    ):
        assert phrase in docs, phrase


def test_syntax_errors_in_files_name_the_file_and_line(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("optimizer:\n  name: adam\n  learning_rate: [0.1\n")
    with pytest.raises(gc.ConfigError, match=rf"^{re.escape(str(bad_yaml))}:4:1: invalid YAML"):
        gc.from_config(bad_yaml)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{\n  "optimizer": {"name": "adam" "learning_rate": 1}\n}\n')
    with pytest.raises(gc.ConfigError, match=rf"^{re.escape(str(bad_json))}:2:32: invalid JSON"):
        gc.from_config(str(bad_json))


def test_config_error_is_a_value_error_with_the_path():
    with pytest.raises(ValueError, match=r"optimizer\.b1") as info:
        gc.from_config(opt(b1=2.0))
    assert isinstance(info.value, gc.ConfigError)
    assert info.value.path == "optimizer.b1"
    assert info.value.message.startswith("must be in")


# --- generated configs --------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_names = st.sampled_from(
    [
        "adam",
        "adamw",
        "sgd",
        "lion",
        "nnabla.adam",
        "muon",
        "lamb",
        "returnn.amsgrad",
        "rmsprop",
        "adamm",
        "",
    ]
) | st.text(max_size=6)
_keys = st.sampled_from(
    [
        "learning_rate",
        "b1",
        "b2",
        "eps",
        "momentum",
        "weight_decay",
        "mask",
        "nesterov",
        "mu_dtype",
        "decay",
        "warmup",
    ]
) | st.text(max_size=5)
_schedule = st.fixed_dictionaries(
    {
        "name": st.sampled_from(
            ["cosine_decay", "constant", "warmup_cosine_decay", "nnabla_step", "join", "cosin"]
        )
    },
    optional={
        "init_value": _json,
        "decay_steps": _json,
        "value": _json,
        "warmup": _json,
        "init_lr": _json,
        "gamma": _json,
        "iter_steps": _json,
    },
)
_value = _json | _schedule | st.floats(-2, 2) | st.integers(-3, 10**4)
_optimizer = st.builds(
    lambda name, extra: {"name": name, **extra}, _names, st.dictionaries(_keys, _value, max_size=4)
)
_section_values = {
    "weight_decay": st.fixed_dictionaries(
        {},
        optional={
            "rate": _value,
            "mode": st.sampled_from(["coupled", "decoupled", "x"]),
            "mask": _json,
        },
    ),
    "clip": st.dictionaries(st.sampled_from(["value", "norm", "global_norm", "x"]), _value),
    "noise": st.dictionaries(st.sampled_from(["eta", "gamma", "seed"]), _value),
    "nonfinite": st.sampled_from(["zero", "skip"])
    | st.dictionaries(st.sampled_from(["action", "max_consecutive_errors"]), _value),
    "lr_multipliers": st.fixed_dictionaries(
        {}, optional={"rules": _json, "default": _value, "strict": _json}
    ),
    "accumulate": st.dictionaries(st.sampled_from(["k", "average"]), _value),
    "ema": st.dictionaries(st.sampled_from(["decay", "debias"]), _value),
}
_configs = (
    st.fixed_dictionaries(
        {}, optional={"optimizer": _optimizer | _json, **_section_values, "extra": _json}
    )
    | _json
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_configs)
def test_generated_configs_raise_only_config_errors(config):
    try:
        tx = gc.from_config(config if isinstance(config, dict) else {"optimizer": config})
    except gc.ConfigError:
        return
    assert isinstance(tx, gradtx.GradientTransformation)
    assert gc.to_config(tx) == tx.config


_nnabla_solver = st.fixed_dictionaries(
    {"type": st.sampled_from(["Adam", "Sgd", "Momentum", "AdamW", "Lars", "Ada"]) | _json},
    optional={
        "adam_param": st.dictionaries(st.sampled_from(["alpha", "beta1", "eps", "x"]), _value),
        "sgd_param": _json,
        "weight_decay": _value,
        "lr_scheduler_type": st.sampled_from(["", "Cosine", "Step", "Custom"]) | _json,
        "cosine_scheduler_param": st.dictionaries(st.sampled_from(["max_iter", "x"]), _value),
        "step_scheduler_param": _json,
        "lr_decay": _value,
        "lr_decay_interval": _value,
        "lr_warmup_scheduler_type": st.sampled_from(["", "Linear"]) | _json,
        "linear_warmup_scheduler_param": _json,
    },
)
_nnabla = (
    st.fixed_dictionaries(
        {"solver": _nnabla_solver},
        optional={"update_interval": _value, "parameter_variable": _json, "name": _json},
    )
    | _nnabla_solver
)
_returnn = st.fixed_dictionaries(
    {},
    optional={
        "optimizer": st.sampled_from(["adam", "nadam", "momentum", "sgd", "x"])
        | _json
        | st.fixed_dictionaries(
            {"class": st.sampled_from(["adam", "amsgrad", "y"]) | _json},
            optional={"beta1": _value, "epsilon": _value, "lr": _value},
        ),
        "learning_rate": _value,
        "optimizer_epsilon": _value,
        "momentum": _value,
        "gradient_clip": _value,
        "gradient_clip_global_norm": _value,
        "gradient_noise": _value,
        "accum_grad_multiple_step": _value,
        "gradient_nan_inf_filter": _json,
        "newbob": _json,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_nnabla, _returnn, st.integers(-1, 5))
def test_generated_dialect_configs_raise_only_config_errors(nnabla_cfg, returnn_cfg, comm):
    for build in (
        lambda: gradtx.nnabla.from_nnabla(nnabla_cfg, comm_size=comm),
        lambda: gradtx.returnn.from_returnn(returnn_cfg),
    ):
        try:
            tx = build()
        except gc.ConfigError:
            continue
        assert isinstance(tx, gradtx.GradientTransformation)


# --------------------------------------------------------------------------------------------
# non-finite numbers, in every format and dialect
# --------------------------------------------------------------------------------------------

NONFINITE = [
    (
        "lr-inf",
        lambda: gc.from_config({"optimizer": {**SGD, "learning_rate": math.inf}}),
        "optimizer.learning_rate",
    ),
    (
        "lr-nan",
        lambda: gc.from_config({"optimizer": {**SGD, "learning_rate": math.nan}}),
        "optimizer.learning_rate",
    ),
    (
        "lr-yaml-inf",
        lambda: gc.from_config("optimizer: {name: sgd, learning_rate: .inf}"),
        "optimizer.learning_rate",
    ),
    (
        "lr-string-inf",
        lambda: gc.from_config({"optimizer": {**SGD, "learning_rate": "inf"}}),
        "optimizer.learning_rate",
    ),
    (
        "lr-string-1e999",
        lambda: gc.from_config("optimizer: {name: sgd, learning_rate: 1e999}"),
        "optimizer.learning_rate",
    ),
    (
        "lr-json-Infinity",
        lambda: gc.from_config('{"optimizer": {"name": "sgd", "learning_rate": Infinity}}'),
        "optimizer.learning_rate",
    ),
    (
        "adamw-weight_decay-nan",
        lambda: gc.from_config(
            {"optimizer": {"name": "adamw", "learning_rate": 0.1, "weight_decay": math.nan}}
        ),
        "optimizer.weight_decay",
    ),
    (
        "weight_decay-section-inf",
        lambda: gc.from_config(
            {"optimizer": SGD, "weight_decay": {"rate": math.inf, "mode": "coupled"}}
        ),
        "weight_decay.rate",
    ),
    (
        "schedule-value-inf",
        lambda: gc.from_config(
            {
                "optimizer": {
                    "name": "sgd",
                    "learning_rate": {**LINEAR, "end_value": -math.inf, "transition_steps": 5},
                }
            }
        ),
        "optimizer.learning_rate.end_value",
    ),
    (
        "nnabla-alpha-inf",
        lambda: from_nnabla({"solver": {"type": "Adam", "adam_param": {"alpha": math.inf}}}),
        "solver.adam_param.alpha",
    ),
    (
        "nntxt-lr-1e999",
        lambda: from_nnabla('solver {\n  type: "Sgd"\n  sgd_param { lr: 1e999 }\n}\n'),
        "solver.sgd_param.lr",
    ),
    (
        "nntxt-lr-nan",
        lambda: from_nnabla('solver { type: "Sgd" sgd_param { lr: nan } }'),
        "solver.sgd_param.lr",
    ),
    (
        "returnn-lr-inf",
        lambda: from_returnn({"optimizer": "adam", "learning_rate": math.inf}),
        "learning_rate",
    ),
    (
        "returnn-clip-nan",
        lambda: from_returnn({"optimizer": "adam", "gradient_clip_global_norm": math.nan}),
        "gradient_clip_global_norm",
    ),
]


@pytest.mark.parametrize(("case", "call", "path"), NONFINITE, ids=[c[0] for c in NONFINITE])
def test_non_finite_numbers_are_refused_naming_the_field(case, call, path):
    err = config_error(call)
    assert err.path == path, err
    assert "must be a finite number" in err.message
