"""`python -m benchmarks --lowbit`: training state in 4 bits (issue 50): step time against the
codecs' floors, state bytes, and training quality.

`python -m benchmarks --lowbit [--quick] [--part steps|quality ...] [--repeats N]` prints the
tables and writes `lowbit.json` / `lowbit.md` into `--out`.

Steps (one process, interleaved rounds; the median and IQR of the per-round ratios): a donated
jitted `params, state -> apply_updates(params, update)` on one (2048, 2048) float32 leaf (a
fixed gradient), with `gradtx.adamw(1e-3)` and its moments in float32, bf16, 8-bit dynamic
(`gradtx.quantized()`), 8-bit square root (`quantized(mapping="sqrt")`) and 4-bit
(`quantized(bits=4)`). Against each codec, floors: the same AdamW arithmetic written here in
JAX (bias corrections, weight decay) on moments stored with the codec, in one jitted step:

- `reuse scales`: decode, update, re-encode with the old scales (no reduction): the codec's
  arithmetic alone;
- `fresh max`: the new scales from the new moments with the codec's own reduction (block
  maxima by halving; the 4-bit second moment's row and column maxima), the moment written out
  first (`optimization_barrier`) where the codec does so, without its NaN / inf path (the
  codes are computed in a `lax.cond` as the codec's are: see `_codes`);
- `codec floor`: `decode(encode(m))` and `decode(encode(v))` with the library's codec
  (`gradtx.state._quantize.encode` / `decode`, its NaN / inf `lax.cond` included): what the
  library's step costs at least with that codec. The floors use the codecs' own level
  arithmetic (private functions of `gradtx.state`), so they differ from the codec only by what
  they leave out.

Where the time goes (sqrt 8-bit and 4-bit): decode alone, the reduction alone, encoding with
given scales alone and the library's whole encode, each a jitted function of its own (reading
its inputs from memory and writing its outputs), timed in rounds with the float32 AdamW step.

Quality: the `--quality` language model (benchmarks/quality.py) for 600 steps at AdamW's best
peak learning rate there (0.01, warm-up and cosine decay), 3 seeds (a seed sets the init and
the batch order), final held-out loss; float32 params with float32 / 8-bit / 4-bit moments, and
bf16 params (the loss computed in float32 from them) with 4-bit moments: plain, with
`gradtx.with_compensation(residual="int8")` and with stochastic rounding. Every 2-D leaf of the
model is quantized (`min_size=1024`; the vectors stay float32). A 2,000-step 4-bit run checks
for NaN. The demo MLP (`python -m gradtx demo`: spirals, 2-64-64-4, batch 128, 3,000 steps of
Adam at 3e-3) with float32 / 8-bit sqrt / 4-bit / bf16 + compensation + 4-bit, 3 seeds.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .harness import Budget, Stats, interleaved, machine_facts, paired_ratio
from .report import write_result

PARTS = ("steps", "quality")
LR, B1, B2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 1e-4
FULL: dict[str, Any] = {"shape": (2048, 2048), "calls": 5}
QUICK: dict[str, Any] = {"shape": (64, 256), "calls": 2}
CODECS: dict[str, dict[str, Any]] = {  # keyword arguments of gradtx.quantized
    "8-bit dynamic": {},
    "8-bit sqrt": {"mapping": "sqrt"},
    "4-bit": {"bits": 4},
}
PIECE_CODECS = ("8-bit sqrt", "4-bit")


def _spec(codec: str, **kw: Any) -> Any:
    import gradtx

    return gradtx.quantized(**CODECS[codec], **kw)


def _adamw(lr: Any, moments: Any = None, weight_decay: float = WD) -> Any:
    import gradtx

    return gradtx.adamw(lr, weight_decay=weight_decay, mu_dtype=moments, nu_dtype=moments)


# --------------------------------------------------------------------------------------------
# Steps: runners
# --------------------------------------------------------------------------------------------


class _Carry:
    """A compiled step fed its own outputs: `carry = fn(*carry, *args)`."""

    def __init__(self, fn: Callable, carry: tuple, args: tuple, calls: int):
        self.fn, self.carry, self.args, self.calls = fn, carry, args, calls

    def run_block(self) -> float:
        c = self.carry
        t = time.perf_counter()
        for _ in range(self.calls):
            c = self.fn(*c, *self.args)
        jax.block_until_ready(c)
        self.carry = c
        return (time.perf_counter() - t) / self.calls


class _Fixed:
    """A compiled function called on the same inputs (a piece of a step, not donated)."""

    def __init__(self, fn: Callable, args: tuple, calls: int):
        self.fn, self.args, self.calls = fn, args, calls

    def run_block(self) -> float:
        t = time.perf_counter()
        outs = [self.fn(*self.args) for _ in range(self.calls)]
        jax.block_until_ready(outs)
        return (time.perf_counter() - t) / self.calls


def _copy(tree: Any) -> Any:
    return jax.tree.map(jnp.copy, tree)


def _library_step(tx: Any) -> Callable:
    import gradtx

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state

    return jax.jit(step, donate_argnums=(0, 1))


def _moments_math(m, v, g):
    return B1 * m + (1 - B1) * g, B2 * v + (1 - B2) * g * g


def _update_math(p, m, v, t):
    """AdamW's new params as `gradtx.adamw(LR, weight_decay=WD)` computes them, in float32,
    from the new moments (as stored) and step number `t` (1 at the first step)."""
    tf = t.astype(jnp.float32)
    m_hat, v_hat = m / (1 - B1**tf), v / (1 - B2**tf)
    return p - LR * (m_hat / (jnp.sqrt(v_hat) + EPS) + WD * p)


# The codec pieces, from the library's own arithmetic (so a floor differs from the codec only by
# what it leaves out).


def _stored(x: jax.Array, codec: str, signed: bool) -> jax.Array:
    from gradtx.state import _lowbit

    if codec == "dynamic":
        return x if signed else jnp.sqrt(jnp.maximum(x, 0.0))
    return _lowbit._stored(x, codec, signed)


def _reduce(s: jax.Array, shape: tuple, block: int, codec: str) -> jax.Array:
    """The codec's scales of stored value `s` (block maxima, or row then column maxima)."""
    from gradtx.state import _lowbit
    from gradtx.state._blocks import _block_absmax

    return _block_absmax(s, block) if codec == "dynamic" else _lowbit._scales(s, block, codec)


def _codes(s: jax.Array, scale: jax.Array, shape: tuple, block: int, signed: bool, codec: str):
    """The codes of stored value `s` under given scales (no reduction, no NaN path), computed
    as the codec's `encode` computes them: inside a `lax.cond` on the scales being finite (here
    with the same function on both sides), the 4-bit nibbles packed after it. The `cond` is
    what makes XLA:CPU emit the codes as one kernel: without it the step takes ~3x as long (it
    writes out the intermediates of the level arithmetic: measured 215 ms against 65 ms for
    the 8-bit dynamic codec on 4M values), and packing the nibbles in the same kernel as the
    levels takes ~5x as long as packing them apart."""
    from gradtx.state import _lowbit, _quantize
    from gradtx.state._blocks import _per_value, _scale_factors

    def levels(_):
        if _lowbit.rank1(shape, codec, block):
            y = s * _lowbit._rank1_inverse(scale, shape)
        else:
            pre, inv = _scale_factors(scale)
            pre, inv = _per_value(pre, shape, block), _per_value(inv, shape, block)
            if codec == "dynamic":
                return _quantize._codes(s, pre, inv, signed)
            y = s * pre * inv
        k = _lowbit._levels(y, codec, signed)
        return k.astype(
            jnp.uint8 if codec in _lowbit.FOUR_BIT else _lowbit.code_dtype(codec, signed)
        )

    k = jax.lax.cond(jnp.isfinite(jnp.sum(scale)), levels, levels, None)
    return _lowbit._pack_nibbles(k) if codec in _lowbit.FOUR_BIT else k


def _floor_step(kind: str) -> Callable:
    """A donated AdamW step on quantized moments `(count, qm, qv)`: `kind` is `reuse`,
    `fresh` or `roundtrip` (see the module docstring)."""
    from gradtx.state import _quantize
    from gradtx.state._quantize import QuantizedArray

    def requantize(q: QuantizedArray, x: jax.Array) -> QuantizedArray:
        if kind == "roundtrip":
            return _quantize.encode(x, block_size=q.block_size, signed=q.signed, codec=q.codec)
        s = _stored(x, q.codec, q.signed)
        if kind == "reuse":
            scale = q.scale
        else:
            if q.codec != "dynamic":  # the arithmetic codecs write the moment out first
                s = jax.lax.optimization_barrier(s)
            scale = _reduce(s, q.shape, q.block_size, q.codec)
        codes = _codes(s, scale, q.shape, q.block_size, q.signed, q.codec)
        return QuantizedArray(codes, scale, q.shape, q.block_size, q.signed, q.codec)

    def step(p, state, g):
        count, qm, qv = state
        m, v = _moments_math(_quantize.decode(qm), _quantize.decode(qv), g)
        qm, qv = requantize(qm, m), requantize(qv, v)
        # the update reads the moments as stored, as the library's does
        p = _update_math(p, _quantize.decode(qm), _quantize.decode(qv), count + 1)
        return p, (count + 1, qm, qv)

    return jax.jit(step, donate_argnums=(0, 1))


def _bare_step(p, state, g):
    count, m, v = state
    m, v = _moments_math(m, v, g)
    return _update_math(p, m, v, count + 1), (count + 1, m, v)


def _moments(state: Any) -> tuple[Any, Any]:
    """The (mu, nu) QuantizedArrays of a one-leaf quantized AdamW state."""
    from gradtx.state._quantize import is_quantized

    qs = [x for x in jax.tree.leaves(state, is_leaf=is_quantized) if is_quantized(x)]
    mu = [q for q in qs if q.signed]
    nu = [q for q in qs if not q.signed]
    assert len(mu) == len(nu) == 1, qs
    return mu[0], nu[0]


def _nbytes(x: Any) -> int:
    return int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize


def _compile_and_time(runners: dict[str, Any], budget: Any, log: Callable[[str], None]) -> dict:
    """Each runner's first block (its compilation) in turn, then interleaved timed rounds."""
    for name, r in runners.items():
        log(f"  compiling {name}")
        r.run_block()
    return interleaved(runners, budget)


def step_times(quick: bool, rounds: int | None, log: Callable[[str], None]) -> dict[str, Any]:
    import gradtx

    size = QUICK if quick else FULL
    shape, calls = size["shape"], size["calls"]
    n = int(np.prod(shape))
    budget = (
        Budget(warmup=1, min_rounds=2, max_rounds=rounds or 2, seconds=0.0)
        if quick
        else Budget(warmup=1, min_rounds=rounds or 7, max_rounds=rounds or 21, seconds=60.0)
    )
    params = jax.random.normal(jax.random.key(0), shape)
    grads = 1e-2 * jax.random.normal(jax.random.key(1), shape)
    # a realistic state to start from: the moments after one float32 step
    m0 = (1 - B1) * grads
    v0 = (1 - B2) * grads * grads
    one = jnp.ones((), jnp.int32)

    txs = {"float32": _adamw(LR), "bf16 moments": _adamw(LR, jnp.bfloat16)}
    txs.update({c: _adamw(LR, _spec(c)) for c in CODECS})
    runners: dict[str, Any] = {}
    bytes_rows: dict[str, dict[str, Any]] = {}
    states: dict[str, Any] = {}
    for name, tx in txs.items():
        state = tx.init(params)
        runners[name] = _Carry(_library_step(tx), (_copy(params), state), (grads,), calls)
        bytes_rows[name] = {"total": gradtx.state_bytes(state, params).per_parameter}
        states[name] = state
    runners["floor: float32 adamw (bare)"] = _Carry(
        jax.jit(_bare_step, donate_argnums=(0, 1)),
        (_copy(params), (jnp.copy(one), jnp.copy(m0), jnp.copy(v0))),
        (grads,),
        calls,
    )
    from gradtx.state import _quantize

    for c in CODECS:
        mu, nu = _moments(states[c])
        qm = _quantize.encode(m0, block_size=mu.block_size, signed=True, codec=mu.codec)
        qv = _quantize.encode(v0, block_size=nu.block_size, signed=False, codec=nu.codec)
        for kind, label in (("reuse", "reuse scales"), ("fresh", "fresh max"), ("roundtrip", "")):
            name = f"{c}: {label}" if label else f"{c}: codec floor"
            carry = (_copy(params), (jnp.copy(one), _copy(qm), _copy(qv)))
            runners[name] = _Carry(_floor_step(kind), carry, (grads,), calls)
        bytes_rows[c].update(
            mu_codes=_nbytes(mu.codes) / n,
            mu_scales=_nbytes(mu.scale) / n,
            nu_codes=_nbytes(nu.codes) / n,
            nu_scales=_nbytes(nu.scale) / n,
        )
    times = _compile_and_time(runners, budget, log)
    rows = []
    for name in runners:
        r = paired_ratio(times, name, "float32")
        assert r is not None
        row: dict[str, Any] = {"variant": name, "ms": 1e3 * Stats.of(times[name]).median}
        row["vs_float32"] = r.as_dict()
        if name in CODECS:
            floor = paired_ratio(times, name, f"{name}: codec floor")
            assert floor is not None
            row["vs_codec_floor"] = floor.as_dict()
        rows.append(row)
        log(f"  {name:32s} {row['ms']:8.2f} ms  x{r.median:.2f} [{r.q1:.2f}, {r.q3:.2f}]")
    del runners
    gc.collect()
    pieces = where_the_time_goes(params, grads, m0, v0, states, budget, calls, log)
    return {
        "shape": list(shape),
        "calls_per_block": calls,
        "rounds": len(times["float32"]),
        "rows": rows,
        "bytes": bytes_rows,
        "pieces": pieces,
    }


def where_the_time_goes(params, grads, m0, v0, states, budget, calls, log) -> list[dict]:
    from gradtx.state import _quantize

    runners: dict[str, Any] = {
        "float32 adamw step": _Carry(
            _library_step(_adamw(LR)), (_copy(params), _adamw(LR).init(params)), (grads,), calls
        )
    }
    for c in PIECE_CODECS:
        mu, nu = _moments(states[c])
        qs = [
            _quantize.encode(x, block_size=q.block_size, signed=q.signed, codec=q.codec)
            for x, q in ((m0, mu), (v0, nu))
        ]

        def scales(m, v, qs=qs):
            return [
                _reduce(_stored(x, q.codec, q.signed), q.shape, q.block_size, q.codec)
                for x, q in zip((m, v), qs, strict=True)
            ]

        def given(m, v, sm, sv, qs=qs):
            return [
                _codes(_stored(x, q.codec, q.signed), s, q.shape, q.block_size, q.signed, q.codec)
                for x, s, q in zip((m, v), (sm, sv), qs, strict=True)
            ]

        def whole(m, v, qs=qs):
            return [
                _quantize.encode(x, block_size=q.block_size, signed=q.signed, codec=q.codec)
                for x, q in zip((m, v), qs, strict=True)
            ]

        runners[f"{c}: decode m, v"] = _Fixed(
            jax.jit(lambda a, b: (_quantize.decode(a), _quantize.decode(b))), tuple(qs), calls
        )
        runners[f"{c}: reduction (scales of m, v)"] = _Fixed(jax.jit(scales), (m0, v0), calls)
        runners[f"{c}: encode m, v, given scales"] = _Fixed(
            jax.jit(given), (m0, v0, qs[0].scale, qs[1].scale), calls
        )
        runners[f"{c}: encode m, v (library)"] = _Fixed(jax.jit(whole), (m0, v0), calls)
    times = _compile_and_time(runners, budget, log)
    rows = []
    for name in runners:
        r = paired_ratio(times, name, "float32 adamw step")
        assert r is not None
        rows.append(
            {"piece": name, "ms": 1e3 * Stats.of(times[name]).median, "vs_float32": r.as_dict()}
        )
        log(f"  {name:40s} {rows[-1]['ms']:8.2f} ms  x{r.median:.2f} of the float32 step")
    return rows


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _ratio(d: dict | None) -> str:
    return "—" if d is None else f"{d['median']:.2f} ({d['q1']:.2f}–{d['q3']:.2f})"


def _steps_markdown(st: dict[str, Any]) -> list[str]:
    shape = "x".join(map(str, st["shape"]))
    lines = [
        f"Step time: donated jitted AdamW step on one {shape} float32 leaf (median ms; ratios: "
        f"median (IQR) of the per-round ratios, {st['rounds']} interleaved rounds of "
        f"{st['calls_per_block']} calls).",
        "",
        "| variant | ms | time / float32 | time / codec floor | state B/param |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in st["rows"]:
        b = st["bytes"].get(r["variant"])
        nbytes = "" if b is None else f"{b['total']:.3f}"
        lines.append(
            f"| {r['variant']} | {r['ms']:.2f} | {_ratio(r['vs_float32'])} | "
            f"{_ratio(r.get('vs_codec_floor'))} | {nbytes} |"
        )
    lines += [
        "",
        "State bytes per parameter (codes + scales of each moment):",
        "",
        "| codec | m codes | m scales | v codes | v scales | state total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in CODECS:
        b = st["bytes"][c]
        lines.append(
            f"| {c} | {b['mu_codes']:.4f} | {b['mu_scales']:.4f} | {b['nu_codes']:.4f} | "
            f"{b['nu_scales']:.4f} | {b['total']:.4f} |"
        )
    lines += [
        "",
        "Where the time goes: each piece a jitted function of its own (reading its inputs, "
        "writing its outputs), against the float32 AdamW step timed in the same rounds.",
        "",
        "| piece | ms | / float32 step |",
        "|---|---:|---:|",
    ]
    for r in st["pieces"]:
        lines.append(f"| {r['piece']} | {r['ms']:.2f} | {_ratio(r['vs_float32'])} |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"Run {m['date']}{' (--quick sizes)' if result['quick'] else ''}: {m['cpu']}, "
        f"{m['cpu_count']} cores; jax {m['jax']}, backend {m['backend']}. Load average before "
        f"{', '.join(f'{x:.2f}' for x in result['load_before'])}, after "
        f"{', '.join(f'{x:.2f}' for x in result['load_after'])}. Whole run "
        f"{result['seconds']:.0f} s.",
    ]
    if result.get("steps"):
        lines += ["", *_steps_markdown(result["steps"])]
    if result.get("lm") or result.get("demo"):
        from .lowbit_quality import demo_markdown, lm_markdown

        lines += ["", *lm_markdown(result["lm"]), "", *demo_markdown(result["demo"])]
    return "\n".join(lines)


def main(
    *,
    quick: bool,
    out: str,
    parts: list[str] | None = None,
    rounds: int | None = None,
    log: Callable[[str], None] = print,
) -> int:
    parts = list(parts or PARTS)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"--lowbit: unknown --part {unknown}; choose from {list(PARTS)}")
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "machine": machine_facts(),
        "quick": quick,
        "load_before": os.getloadavg(),
    }
    if "steps" in parts:
        log("steps")
        result["steps"] = step_times(quick, rounds, log)
    if "quality" in parts:
        from .lowbit_quality import demo_quality, lm_quality

        log("quality: language model")
        result["lm"] = lm_quality(quick, log)
        log("quality: demo MLP")
        result["demo"] = demo_quality(quick, log)
    result["load_after"] = os.getloadavg()
    result["seconds"] = time.perf_counter() - t0
    write_result(result, markdown(result), out, "lowbit")
    return 0
