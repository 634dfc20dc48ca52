"""The golden record: every table case's `STEPS`-step trajectory (updates and state), bit for bit.

Recorded once from the tier's trajectory (tests/compiled.py: `jit_step` on the canonical tree),
before the rule mechanism was rewritten, and kept in tests/golden/trajectories.npz. A refactoring
that says "nothing changes for users" must reproduce it: `test_generic`'s
`test_trajectory_reproduces_the_golden_record` compares every step's updates and state byte for
byte, and on a difference names the step, the leaf and its distance in units in the last place.

Bits depend on the compiler and the processor: the record is exact for the jax / jaxlib versions,
XLA:CPU emitter, processor architecture and processor vendor it was made with (its
`fingerprint`, as the main lane of
`python -m tests.lanes` runs). Under another fingerprint (a version lane, a plain `pytest` without
the lane's emitter flag) the comparison is to float32 rounding instead (`LOOSE_RTOL`), and says so.
The vendor matters because XLA:CPU computes `rsqrt` (which its simplifier makes of `x / sqrt(y)`)
from the processor's reciprocal square-root estimate and a Newton step, and Intel's and AMD's
estimates differ: on an AMD EPYC the Adagrad / RMSprop cases land 1-2 ulp from a record made on
Intel. The record was made before the vendor joined the fingerprint, on the Intel machines where
it reproduced bit for bit for every stop until an AMD machine showed the difference; its
fingerprint names GenuineIntel.

The codec record (`CODECS`) does the same for the moment rules' storage options, which the
table runs only in float32 and bf16: 8-bit buffers packed and per leaf, and bf16 params, each
`STEPS` steps of one `jax.lax.scan` on `codec_params()`.

`ULP_ALLOWED` lists the cases whose rounding order changed on purpose, with the reason; they may
differ by at most one unit in the last place.

Record anew (only for a deliberate change of numbers, said in the commit):
`.venv/bin/python -m tests.golden --record`; a case new to the table: `--new` (records only
the cases the record lacks).
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradtx

PATH = pathlib.Path(__file__).parent / "golden" / "trajectories.npz"
LOOSE_RTOL = 1e-5
LOOSE_ATOL = 1e-7

#: case name -> why its rounding order changed (at most 1 ulp apart from the record).
ULP_ALLOWED: dict[str, str] = {}


def fingerprint() -> dict[str, Any]:
    import jaxlib

    from .lanes import EMITTER_FLAG

    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "classic_emitter": EMITTER_FLAG in os.environ.get("XLA_FLAGS", ""),
        "machine": platform.machine(),
        "cpu_vendor": cpu_vendor(),
    }


def cpu_vendor() -> str:
    """The processor's vendor (`GenuineIntel`, `AuthenticAMD`, ...) from /proc/cpuinfo, else
    what `platform.processor()` says."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _leaves(tree: Any) -> list[tuple[str, np.ndarray]]:
    from gradtx.tree import paths

    leaves = [np.asarray(x) for x in jax.tree.leaves(tree)]
    return list(zip(paths(tree), leaves, strict=True))


def _manifest(tree: Any) -> list[list[Any]]:
    return [[path, x.dtype.name, list(x.shape)] for path, x in _leaves(tree)]


def _bytes(tree: Any) -> np.ndarray:
    parts = [np.ascontiguousarray(x).view(np.uint8).ravel() for _, x in _leaves(tree)]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def record_case(name: str) -> dict[str, Any]:
    """The case's trajectory as stored: one row of bytes per step, and the leaves' layout."""
    from . import compiled

    run = compiled.trajectory(name)
    return {
        "updates": np.stack([_bytes(u) for u in run.updates]),
        "states": np.stack([_bytes(s) for s in run.states]),
        "layout": {"updates": _manifest(run.updates[0]), "states": _manifest(run.states[0])},
    }


def _codec_cases() -> dict[str, Any]:
    q8 = gradtx.quantized(block_size=64, min_size=256)
    q16 = gradtx.quantized(block_size=16, min_size=0)
    apart = gradtx.quantized(block_size=64, min_size=256, pack_leaves=False)
    bf16 = jnp.bfloat16
    return {
        "adam_q8": lambda: gradtx.adam(0.01, mu_dtype=q8, nu_dtype=q8),
        "adam_q8_per_leaf": lambda: gradtx.adam(0.01, mu_dtype=apart, nu_dtype=apart),
        "adam_q16_mu_only": lambda: gradtx.adam(0.01, mu_dtype=q16),
        "nadamw_q8": lambda: gradtx.nadamw(0.01, weight_decay=1e-3, mu_dtype=q8, nu_dtype=q8),
        "amsgrad_q8": lambda: gradtx.amsgrad(0.01, mu_dtype=q8, nu_dtype=q8),
        "adamax_q8": lambda: gradtx.adamax(0.01, mu_dtype=q8, nu_dtype=q8),
        "adabelief_q8": lambda: gradtx.adabelief(0.01, mu_dtype=q8, nu_dtype=q8),
        "yogi_q8": lambda: gradtx.yogi(0.01, mu_dtype=q8, nu_dtype=q8),
        "radam_q8": lambda: gradtx.radam(0.01, mu_dtype=q8, nu_dtype=q8),
        "novograd_q8": lambda: gradtx.novograd(0.01, mu_dtype=q8),
        "amsbound_q8": lambda: gradtx.amsbound(0.01, mu_dtype=q8, nu_dtype=q8),
        "eve_q8": lambda: gradtx.eve(0.01, mu_dtype=q8, nu_dtype=q8),
        "eps_hat_amsgrad_q8": lambda: gradtx.chain(
            gradtx.scale_by_adam_eps_hat(amsgrad=True, nesterov=True, mu_dtype=q8, nu_dtype=q8),
            gradtx.scale(-0.01),
        ),
        "lion_q8": lambda: gradtx.lion(0.003, mu_dtype=q8),
        "lion_q8_per_leaf": lambda: gradtx.lion(0.003, mu_dtype=apart),
        "sgd_nesterov_q8": lambda: gradtx.sgd(
            0.002, momentum=0.9, nesterov=True, accumulator_dtype=q8
        ),
        "adam_bf16_params": lambda: gradtx.adam(0.01, mu_dtype=bf16),
        "sign_agreement_bf16": lambda: gradtx.chain(
            gradtx.scale_by_sign_agreement(mu_dtype=bf16), gradtx.scale(-0.01)
        ),
    }


def codec_params(dtype: Any = None) -> dict[str, Any]:
    """Four leaves that 8-bit storage lays out differently: row blocks, flat blocks, a short last
    block, and one below `min_size`."""
    rng = np.random.default_rng(0)
    dtype = dtype or jnp.float32
    shapes = {"w": (24, 40), "v": (300,), "u": (263,), "b": (8,)}
    return {k: jnp.asarray(rng.standard_normal(s), dtype) for k, s in shapes.items()}


def codec_trajectory(name: str) -> tuple[list, list]:
    """`STEPS` updates and the `STEPS + 1` states of codec case `name` (host copies)."""
    from . import compiled

    tx = _codec_cases()[name]()
    params = codec_params(jnp.bfloat16 if name.endswith("bf16_params") else None)

    def loss(p: Any) -> Any:
        return sum(
            jnp.sum(jnp.linspace(0.1, 3.0, x.size).reshape(x.shape) * (x - 0.5) ** 2)
            for x in jax.tree.leaves(p)
        )

    def step(carry: Any, _: Any) -> Any:
        p, s = carry
        value, g = jax.value_and_grad(lambda q: loss(q).astype(jnp.float32))(p)
        u, s = tx.update(g, s, p, value=value)
        return (gradtx.apply_updates(p, u), s), (u, s)

    state0 = tx.init(params)
    _, (us, ss) = jax.jit(lambda p, s: jax.lax.scan(step, (p, s), None, length=compiled.STEPS))(
        params, state0
    )
    us, ss = compiled.host(us), compiled.host(ss)
    updates = [jax.tree.map(lambda x, i=i: x[i], us) for i in range(compiled.STEPS)]
    states = [compiled.host(state0)]
    states += [jax.tree.map(lambda x, i=i: x[i], ss) for i in range(compiled.STEPS)]
    return updates, states


CODECS: tuple[str, ...] = tuple(_codec_cases())


def record(path: pathlib.Path = PATH, *, only_new: bool = False) -> None:
    """Record every case (or, `only_new`, the table cases the record lacks, keeping the others'
    bytes: for a case added to the table; the fingerprint must be the record's)."""
    from . import compiled

    arrays: dict[str, np.ndarray] = {}
    layouts = {}
    if only_new:
        old = Record(path)
        if not old.exact():
            sys.exit("tests.golden --new: this machine's fingerprint is not the record's")
        arrays, layouts = dict(old.arrays), dict(old.meta["layouts"])
    for case in compiled.CASES:
        if f"{case.name}:updates" in arrays:
            continue
        got = record_case(case.name)
        arrays[f"{case.name}:updates"] = got["updates"]
        arrays[f"{case.name}:states"] = got["states"]
        layouts[case.name] = got["layout"]
        print(f"recorded {case.name}", flush=True)
    for name in CODECS:
        if f"codec/{name}:updates" in arrays:
            continue
        updates, states = codec_trajectory(name)
        key = f"codec/{name}"
        arrays[f"{key}:updates"] = np.stack([_bytes(u) for u in updates])
        arrays[f"{key}:states"] = np.stack([_bytes(s) for s in states])
        layouts[key] = {"updates": _manifest(updates[0]), "states": _manifest(states[0])}
        print(f"recorded {key}", flush=True)
    meta = {"fingerprint": fingerprint(), "steps": compiled.STEPS, "layouts": layouts}
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


class Record:
    """The stored record, read once."""

    def __init__(self, path: pathlib.Path = PATH) -> None:
        with np.load(path) as data:
            self.arrays = {k: data[k] for k in data.files if k != "__meta__"}
            self.meta = json.loads(data["__meta__"].tobytes().decode())

    def exact(self) -> bool:
        return bool(self.meta["fingerprint"] == fingerprint())


def _decode(row: np.ndarray, layout: list[list[Any]]) -> list[tuple[str, np.ndarray]]:
    out, start = [], 0
    for path, dtype, shape in layout:
        dt = np.dtype(jnp.dtype(dtype))
        size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        out.append((path, row[start : start + size].view(dt).reshape(shape)))
        start += size
    return out


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance between `a` and `b` in units in the last place (floats of one
    dtype; NaNs of any payload are equal, a NaN against a number is a huge distance)."""
    if a.size == 0:
        return 0
    if not np.issubdtype(a.dtype, np.inexact) and a.dtype.name not in ("bfloat16",):
        return 0 if np.array_equal(a, b) else 2**62
    if np.iscomplexobj(a):
        return max(ulps(a.real.copy(), b.real.copy()), ulps(a.imag.copy(), b.imag.copy()))
    nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    ints = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia, ib = a.view(ints).astype(np.int64), b.view(ints).astype(np.int64)
    bound = np.int64(np.iinfo(ints).min)
    ia = np.where(ia < 0, bound - ia, ia)  # sign-magnitude to an ordered line
    ib = np.where(ib < 0, bound - ib, ib)
    return int(np.max(np.where(nan, 0, np.abs(ia - ib))))


def differences(
    name: str, kind: str, got: list, record: Record, *, exact: bool
) -> list[tuple[int, str, int, float]]:
    """`(step, leaf path, ulps, largest absolute difference)` of every leaf that differs from
    the record (byte for byte when `exact`, else beyond float32 rounding)."""
    want = record.arrays[f"{name}:{kind}"]
    layout = record.meta["layouts"][name][kind]
    assert len(got) == len(want), f"{name}: {len(got)} steps of {kind}, recorded {len(want)}"
    assert _manifest(got[0]) == layout, f"{name}: the {kind}' layout changed from the record"
    out = []
    for step, (tree, row) in enumerate(zip(got, want, strict=True)):
        row_now = _bytes(tree)
        if exact and np.array_equal(row_now, row):
            continue
        for (path, a), (_, b) in zip(_decode(row_now, layout), _decode(row, layout), strict=True):
            if exact:
                if a.tobytes() == b.tobytes():
                    continue
            elif np.issubdtype(a.dtype, np.inexact) or a.dtype.name == "bfloat16":
                a64, b64 = a.astype(np.complex128), b.astype(np.complex128)
                if np.allclose(a64, b64, rtol=LOOSE_RTOL, atol=LOOSE_ATOL, equal_nan=True):
                    continue
            elif np.array_equal(a, b):
                continue
            gap = np.abs(a.astype(np.complex128) - b.astype(np.complex128))
            out.append((step, path, ulps(a, b), float(np.nanmax(gap)) if gap.size else 0.0))
    return out


if __name__ == "__main__":
    mode = sys.argv[1:2]
    if mode not in (["--record"], ["--new"]):
        sys.exit(f"usage: python -m tests.golden --record | --new  (writes {PATH})")
    from .lanes import emitter_env

    env = emitter_env(dict(os.environ))
    if os.environ.get("XLA_FLAGS") != env["XLA_FLAGS"]:  # the main lane's compiler, then record
        os.execve(sys.executable, [sys.executable, "-m", "tests.golden", *mode], env)
    import tests.conftest  # noqa: F401  (the suite's XLA flags, before jax starts)

    record(only_new=mode == ["--new"])
