"""Bounded fuzzing of the config readers and the command line (docs/config.md, "Guarantees").

Random config documents (YAML text, JSON text, nnabla's text format, RETURNN dicts), made by
putting odd values at the places of working configs, give either a `ConfigError` or an
optimizer that initializes and updates (one eager update on one tiny tree, nothing jitted).
Random command lines give exit status 0 or 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradtx import config as gc
from gradtx.cli import _demo
from gradtx.nnabla import from_nnabla
from gradtx.returnn import from_returnn

PARAMS = {"w": jnp.ones((2,), jnp.float32), "b": jnp.zeros((), jnp.float32)}
FUZZ = settings(
    derandomize=True,
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)

ODD: list[Any] = [
    0,
    1,
    -1,
    0.5,
    -0.5,
    1e-3,
    1e308,
    -1e308,
    2**31 - 1,
    2**31,
    -(2**31) - 1,
    2**63,
    2**64,
    10**400,
    math.inf,
    -math.inf,
    math.nan,
    True,
    False,
    None,
    "",
    "abc",
    "1e-3",
    "inf",
    "nan",
    "1e999",
    "x" * 300,
    [],
    [1, 2],
    {},
    {"name": "constant_schedule", "value": 0.1},
    {"name": "cosine_decay", "init_value": 1.0, "decay_steps": 2**31},
    {"name": "sgd", "learning_rate": 0.1},
]
VALUES = st.one_of(
    st.sampled_from(ODD),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)

CONFIGS: list[dict[str, Any]] = [
    {"optimizer": {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}},
    {
        "optimizer": {
            "name": "adamw",
            "learning_rate": {
                "name": "warmup_cosine_decay",
                "init_value": 0.0,
                "peak_value": 1e-3,
                "warmup_steps": 5,
                "decay_steps": 50,
            },
            "weight_decay": 0.01,
        },
        "clip": {"global_norm": 1.0},
    },
    {
        "optimizer": {
            "name": "sgd",
            "learning_rate": {
                "name": "piecewise_constant",
                "init_value": 0.1,
                "boundaries_and_scales": {"10": 0.1},
            },
        },
        "accumulate": {"k": 2},
        "nonfinite": {"action": "skip", "max_consecutive_errors": 3},
    },
    {
        "optimizer": {"name": "lion", "learning_rate": 1e-4},
        "weight_decay": {"rate": 1e-4, "mode": "decoupled"},
        "noise": {"eta": 0.01, "seed": 1},
        "ema": {"decay": 0.9},
        "lr_multipliers": {"rules": {"b": 0.0}},
    },
]
NNABLA: list[dict[str, Any]] = [
    {"solver": {"type": "Adam", "adam_param": {"alpha": 1e-3, "beta1": 0.9}}},
    {
        "solver": {
            "type": "Sgd",
            "sgd_param": {"lr": 0.1},
            "weight_decay": 1e-4,
            "lr_scheduler_type": "Cosine",
            "cosine_scheduler_param": {"max_iter": 100},
        },
        "update_interval": 2,
    },
]
RETURNN: list[dict[str, Any]] = [
    {"optimizer": {"class": "adam", "beta1": 0.9}, "learning_rate": 1e-3},
    {
        "optimizer": "momentum",
        "momentum": 0.9,
        "learning_rate": 0.1,
        "gradient_clip": 1.0,
        "gradient_noise": 0.1,
        "accum_grad_multiple_step": 2,
        "gradient_nan_inf_filter": True,
    },
]


def _slots(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """The key paths of a document's values (where a mutation may go)."""
    out = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.append((*prefix, key))
            out.extend(_slots(value, (*prefix, key)))
    return out


def _put(doc: Any, path: tuple, value: Any) -> Any:
    doc = json.loads(json.dumps(doc))  # a copy
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@st.composite
def _mutated(draw, bases: list[dict[str, Any]]) -> Any:
    doc = draw(st.sampled_from(bases))
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(doc)
        if not slots:
            break
        kind = draw(st.sampled_from(["set", "set", "set", "add", "drop"]))
        slot = draw(st.sampled_from(slots))
        if kind == "set":
            doc = _put(doc, slot, draw(VALUES))
        elif kind == "add":
            doc = _put(doc, (*slot[:-1], draw(st.sampled_from(["lr", "eps", "k", "x"]))), 1)
        else:
            parent = _put(doc, slot, None)
            target = parent
            for key in slot[:-1]:
                target = target[key]
            del target[slot[-1]]
            doc = parent
    return doc


def _works_or_config_error(build) -> None:
    try:
        tx = build()
    except gc.ConfigError:
        return
    state = tx.init(PARAMS)
    tx.update(PARAMS, state, PARAMS, value=jnp.asarray(1.0))
    tx.learning_rate_at([0, 2**31, 10**20])


def _nntxt(message: dict[str, Any], indent: str = "") -> str:
    """A dict as nnabla's protobuf text (lists as repeated fields)."""
    lines = []
    for key, value in message.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                lines.append(f"{indent}{key} {{\n{_nntxt(item, indent + '  ')}{indent}}}")
            elif isinstance(item, bool):
                lines.append(f"{indent}{key}: {'true' if item else 'false'}")
            elif isinstance(item, int | float):
                lines.append(f"{indent}{key}: {item!r}")
            elif item is not None:
                lines.append(f"{indent}{key}: {json.dumps(str(item))}")
    return "".join(line + "\n" for line in lines)


@FUZZ
@given(_mutated(CONFIGS), st.sampled_from(["dict", "yaml", "json"]))
def test_random_configs_give_a_config_error_or_a_working_optimizer(doc, fmt):
    if fmt == "yaml":
        source: Any = yaml.safe_dump(doc, sort_keys=False)
    elif fmt == "json":
        source = json.dumps(doc)
    else:
        source = doc
    _works_or_config_error(lambda: gc.from_config(source))


@FUZZ
@given(_mutated(NNABLA), st.sampled_from(["dict", "yaml", "nntxt"]), st.sampled_from([1, 2, 4]))
def test_random_nnabla_documents_give_a_config_error_or_a_working_optimizer(doc, fmt, comm):
    if fmt == "yaml":
        source: Any = yaml.safe_dump(doc, sort_keys=False)
    elif fmt == "nntxt":
        source = _nntxt(doc)
    else:
        source = doc
    _works_or_config_error(lambda: from_nnabla(source, comm_size=comm))


@FUZZ
@given(_mutated(RETURNN), st.sampled_from(["dict", "json"]))
def test_random_returnn_configs_give_a_config_error_or_a_working_optimizer(doc, fmt):
    source = json.dumps(doc) if fmt == "json" else doc
    _works_or_config_error(lambda: from_returnn(source))


@FUZZ
@given(st.text(alphabet='{}[]:,"-. \n&*!ab1e', max_size=40))
def test_random_text_gives_a_config_error_or_a_working_optimizer(text):
    for read in (gc.from_config, from_nnabla, from_returnn):
        _works_or_config_error(lambda read=read: read(text))


# --------------------------------------------------------------------------------------------
# the command line, in-process
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli")
    write = {
        "good.yaml": "optimizer: {name: sgd, learning_rate: {name: cosine_decay, init_value: 1.0, "
        "decay_steps: 100}}\n",
        "nnabla.yaml": "solver: {type: Adam, adam_param: {alpha: 0.001}}\n",
        "returnn.json": '{"optimizer": "adam", "learning_rate": 0.001}',
        "bad.yaml": "optimizer: {name: adamm}\n",
        "syntax.yaml": "optimizer: [\n",
        "dup.yaml": "optimizer: {name: sgd, name: adam}\n",
        "deep.json": "[" * 2000 + "]" * 2000,
    }
    for name, text in write.items():
        (root / name).write_text(text)
    (root / "latin1.yaml").write_bytes(b"optimizer: {name: \xe9}\n")
    (root / "folder").mkdir()
    (root / "file").write_text("x")
    runs = {"a": {"optimizer": {"name": "sgd", "learning_rate": 0.1}}}
    for name, train in {
        "demo.json": {"steps": 3, "batch_size": 4, "hidden": [2]},
        "demo_bad_batch.json": {"batch_size": "abc"},
        "demo_zero_batch.json": {"batch_size": 0},
        "demo_hidden.json": {"hidden": 5},
        "demo_seed.json": {"seed": -1},
        "demo_train.json": 7,
    }.items():
        (root / name).write_text(json.dumps({"train": train, "optimizers": runs}))
    paths = {name: str(root / name) for name in [*write, "latin1.yaml", "folder", "file"]}
    for p in sorted(root.glob("demo*.json")):
        paths[p.name] = str(p)
    paths.update(
        missing=str(root / "missing.yaml"),
        missing_no_suffix=str(root / "missing"),
        devnull="/dev/null",
        root=str(root),
    )
    return paths


STEPS = ["0", "1", "3", "0,5,100", "-1", "abc", "", "2147483648", "1" + "0" * 30, "1" * 200]


@st.composite
def _argv(draw, files: dict[str, str]) -> list[str]:
    root = Path(files["root"])
    command = draw(st.sampled_from(["describe", "plot-schedule", "demo", "dmeo", "--help"]))
    if command == "demo":
        config = draw(st.sampled_from([k for k in files if k.startswith("demo")] + ["missing"]))
        argv = ["demo", "--config", files[config], "--no-plot"]
        out = draw(st.sampled_from(["out", "file", "file/sub", "folder"]))
        argv += ["--out", str(root / out)]
        if draw(st.booleans()):
            argv += ["--steps", draw(st.sampled_from(STEPS))]
        if draw(st.booleans()):
            argv += ["--optimizers", draw(st.sampled_from(["a", "b", "", "a,a"]))]
        return argv
    if command in ("dmeo", "--help"):
        return [command]
    config = draw(st.sampled_from([k for k in files if not k.startswith("demo")]))
    argv = [command, files[config]]
    options = draw(
        st.lists(
            st.sampled_from(["--dialect", "--comm-size", "--steps", "-o", "--log"]), max_size=4
        )
    )
    if command == "plot-schedule" and draw(st.booleans()):
        options.append("-o")
    for option in options:
        if option == "--dialect":
            argv += [option, draw(st.sampled_from(["gradtx", "nnabla", "returnn", "torch"]))]
        elif option == "--comm-size":
            argv += [option, draw(st.sampled_from(["1", "2", "0", "-3", "abc", "9" * 40]))]
        elif option == "--steps":
            argv += [option, draw(st.sampled_from(STEPS))]
        elif option == "-o":
            name = draw(st.sampled_from(["lr.png", "lr.svg", "x.xyz", "noext", "missing/x.png"]))
            argv += [option, str(root / name)]
        else:
            argv.append(option)
    return argv


def _fake_run(name, config, data, *, steps, batch_size, hidden, seed, chunk=100):
    del config, data, batch_size, hidden, seed, chunk
    return _demo.Run(
        name=name, optimizer="sgd", steps=[steps], loss=[1.0], accuracy=[0.5], final_loss=1.0,
        test_accuracy=0.5, steps_per_s=1.0, compile_s=0.0,
    )  # fmt: skip


@FUZZ
@given(data=st.data())
def test_random_command_lines_exit_0_or_2_without_a_traceback(files, monkeypatch, data):
    from gradtx.__main__ import main

    monkeypatch.setattr(_demo, "train_run", _fake_run)  # training itself is tested elsewhere
    argv = data.draw(_argv(files))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's errors (2) and --help (0)
            code = e.code if isinstance(e.code, int) else 2
    assert code in (0, 2), (argv, err.getvalue())
    assert "Traceback" not in err.getvalue()
    if code == 2:
        assert "error" in err.getvalue() or "usage" in out.getvalue() + err.getvalue(), argv
