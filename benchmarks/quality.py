"""`python -m benchmarks --quality`: training quality of the matrix optimizers and the 2025
first-order set on a small transformer language model.

The task: a character-level causal transformer (pre-norm, 2 layers, width 64, 4 heads, context
64) trained on generated text: sentences of a small grammar with number agreement, nested
clauses and arithmetic facts ("seven plus four is eleven"), so the text has short- and long-range
structure and an entropy floor, and nothing is downloaded. Every optimizer runs the same steps
on the same batches from the same initial params, with warm-up (5%) and cosine decay, at a small
sweep of peak learning rates; each optimizer's best rate (lowest final held-out loss) is
reported:

- final held-out loss, and the number of steps to reach the target loss (AdamW's best final
  held-out loss: "steps to AdamW's loss");
- step time relative to AdamW's (the median over the timed steps of each run, in the same
  process; the matrix optimizers' refreshes included, so amortised over their intervals);
- optimizer-state bytes per parameter.

Each optimizer uses its own default rule for which leaves are matrices: every 2-D leaf
(embeddings, the output head and the attention / MLP kernels), the 1-D leaves (norm scales,
biases) going to its fallback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .harness import machine_facts
from .report import pyplot, write_result
from .workloads import state_bytes

FULL = {"steps": 600, "batch": 32, "context": 64, "width": 64, "layers": 2, "heads": 4}
QUICK = {"steps": 12, "batch": 4, "context": 16, "width": 16, "layers": 1, "heads": 2}
EVAL_EVERY = {"full": 25, "quick": 4}
EVAL_BATCHES = 8

# -- the text ------------------------------------------------------------------------------------

_NUMBERS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
]
_SUBJECTS = {
    "sg": [
        "the cat",
        "the old dog",
        "a small bird",
        "the teacher",
        "my sister",
        "the red fox",
        "a tired farmer",
    ],
    "pl": [
        "the cats",
        "the old dogs",
        "some birds",
        "the teachers",
        "my sisters",
        "the foxes",
        "two farmers",
    ],
}
_VERBS = {
    "sg": ["sees", "likes", "follows", "watches", "finds", "helps"],
    "pl": ["see", "like", "follow", "watch", "find", "help"],
}
_OBJECTS = ["the river", "a red apple", "the small house", "the moon", "an open door", "the garden"]
_ADVERBS = ["today", "at night", "every morning", "quietly", "again", "near the hill"]


def _clause(rng: np.random.Generator, depth: int) -> str:
    number = "sg" if rng.random() < 0.5 else "pl"
    subject = _SUBJECTS[number][rng.integers(len(_SUBJECTS[number]))]
    if depth < 2 and rng.random() < 0.3:  # a relative clause between subject and verb
        subject += " that " + _clause(rng, depth + 1)
    verb = _VERBS[number][rng.integers(len(_VERBS[number]))]
    obj = _OBJECTS[rng.integers(len(_OBJECTS))]
    return f"{subject} {verb} {obj}"


def _sentence(rng: np.random.Generator) -> str:
    if rng.random() < 0.3:
        a, b = rng.integers(10), rng.integers(9)
        if rng.random() < 0.5:
            return f"{_NUMBERS[a]} plus {_NUMBERS[b]} is {_NUMBERS[a + b]}."
        return f"{_NUMBERS[a + b]} minus {_NUMBERS[b]} is {_NUMBERS[a]}."
    text = _clause(rng, 0)
    if rng.random() < 0.4:
        text += " " + _ADVERBS[rng.integers(len(_ADVERBS))]
    return text + "."


def corpus(n_chars: int, seed: int) -> str:
    """`n_chars` characters of the generated text (deterministic in `seed`)."""
    rng = np.random.default_rng(seed)
    parts, size = [], 0
    while size < n_chars:
        s = _sentence(rng)
        parts.append(s)
        size += len(s) + 1
    return " ".join(parts)[:n_chars]


def _alphabet() -> str:
    return "".join(sorted(set(corpus(200_000, 0)) | set(" .abcdefghijklmnopqrstuvwxyz")))


def _batches(text: str, alphabet: str, n: int, batch: int, context: int, seed: int) -> np.ndarray:
    """`(n, batch, context + 1)` int32 windows of `text` at random offsets."""
    index = {c: i for i, c in enumerate(alphabet)}
    codes = np.array([index[c] for c in text], np.int32)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(codes) - context - 1, size=(n, batch))
    return codes[starts[..., None] + np.arange(context + 1)]


# -- the model -----------------------------------------------------------------------------------


def init_params(cfg: dict[str, int], vocab: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d = cfg["width"]

    def normal(*shape: int, scale: float) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape).astype(np.float32) * scale)

    params: dict[str, Any] = {
        "embed": normal(vocab, d, scale=0.5),
        "position": normal(cfg["context"], d, scale=0.1),
        "final_norm": jnp.ones(d, jnp.float32),
        "head": normal(d, vocab, scale=d**-0.5),
    }
    for i in range(cfg["layers"]):
        params[f"layer_{i}"] = {
            "attn_norm": jnp.ones(d, jnp.float32),
            "qkv": normal(d, 3 * d, scale=d**-0.5),
            "proj": normal(d, d, scale=(2 * cfg["layers"] * d) ** -0.5),
            "mlp_norm": jnp.ones(d, jnp.float32),
            "up": normal(d, 4 * d, scale=d**-0.5),
            "up_bias": jnp.zeros(4 * d, jnp.float32),
            "down": normal(4 * d, d, scale=(2 * cfg["layers"] * 4 * d) ** -0.5),
        }
    return params


def _norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def loss_fn(params: dict[str, Any], tokens: jax.Array, heads: int) -> jax.Array:
    """Mean next-character cross-entropy of a `(batch, context + 1)` window batch."""
    x_tok, y = tokens[:, :-1], tokens[:, 1:]
    b, t = x_tok.shape
    h = params["embed"][x_tok] + params["position"][:t]
    d = h.shape[-1]
    mask = jnp.tril(jnp.ones((t, t), bool))
    layers = sorted(k for k in params if k.startswith("layer_"))
    for name in layers:
        p = params[name]
        q, k, v = jnp.split(_norm(h, p["attn_norm"]) @ p["qkv"], 3, axis=-1)
        q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
        att = jax.nn.softmax(jnp.where(mask, logits, -1e9), axis=-1)
        h = h + jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d) @ p["proj"]
        u = jax.nn.gelu(_norm(h, p["mlp_norm"]) @ p["up"] + p["up_bias"])
        h = h + u @ p["down"]
    out = _norm(h, params["final_norm"]) @ params["head"]
    logp = jax.nn.log_softmax(out)
    return -jnp.mean(jnp.take_along_axis(logp, y[..., None], axis=-1))


# -- the optimizers ------------------------------------------------------------------------------


def _schedule(peak: float, steps: int) -> Any:
    import gradtx

    warmup = max(1, steps // 20)
    return gradtx.schedules.warmup_cosine_decay(0.0, peak, warmup, steps, end_value=0.0)


def optimizers() -> dict[str, tuple[Callable[[Any], Any], tuple[float, ...]]]:
    """name -> (learning-rate schedule -> optimizer, the peak learning rates swept)."""
    import gradtx
    from gradtx import contrib

    table: dict[str, tuple[Callable[[Any], Any], tuple[float, ...]]] = {
        "adamw": (lambda lr: gradtx.adamw(lr, weight_decay=0.01), (1e-3, 3e-3, 1e-2)),
        "muon": (
            lambda lr: contrib.muon(lr, adam_learning_rate=lr, weight_decay=0.01),
            (3e-3, 1e-2, 3e-2),
        ),
        "normuon": (
            lambda lr: contrib.normuon(lr, adam_learning_rate=lr, weight_decay=0.01),
            (3e-3, 1e-2, 3e-2),
        ),
        "soap": (lambda lr: contrib.soap(lr, weight_decay=0.01), (1e-3, 3e-3, 1e-2)),
        "shampoo": (lambda lr: contrib.shampoo(lr, weight_decay=0.01), (1e-3, 3e-3, 1e-2)),
        "shampoo-newton": (
            lambda lr: contrib.shampoo(lr, weight_decay=0.01, inverse_root="newton"),
            (1e-3, 3e-3, 1e-2),
        ),
        "kron": (lambda lr: contrib.kron(lr, weight_decay=0.01), (3e-4, 1e-3, 3e-3)),
        "mars": (lambda lr: contrib.mars(lr, weight_decay=0.01), (1e-3, 3e-3, 1e-2)),
        "c-adamw": (
            lambda lr: contrib.cautious_adamw(lr, weight_decay=0.01),
            (1e-3, 3e-3, 1e-2),
        ),
        "adam-mini": (
            lambda lr: contrib.adam_mini(lr, weight_decay=0.01, n_heads=FULL["heads"]),
            (1e-3, 3e-3, 1e-2),
        ),
    }
    return table


# -- the run -------------------------------------------------------------------------------------


def make_step(tx: Any, heads: int) -> Callable:
    """The jitted training step `(params, state, tokens) -> (params, state, loss)`, params and
    state donated."""
    import gradtx

    def step(params, state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, heads)
        updates, state = tx.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state, loss

    return jax.jit(step, donate_argnums=(0, 1))


def _state_bytes(state: Any) -> int:
    return sum(
        int(np.prod(np.shape(x))) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(state)
    )


def train(
    tx: Any,
    params: dict[str, Any],
    train_batches: np.ndarray,
    evaluate: Callable[[Any], jax.Array],
    heads: int,
    eval_every: int,
) -> dict[str, Any]:
    """One run: train losses, held-out losses (`evaluate`, shared by the runs) every `eval_every`
    steps, step times, state size."""
    step = make_step(tx, heads)
    params = jax.tree.map(jnp.array, params)  # a copy: the step donates it
    state = tx.init(params)
    nbytes = state_bytes(state)
    losses, evals, times = [], [], []
    for i, tokens in enumerate(train_batches):
        t0 = time.perf_counter()
        params, state, loss = step(params, state, tokens)
        loss = float(loss)
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        if (i + 1) % eval_every == 0 or i + 1 == len(train_batches):
            evals.append((i + 1, float(evaluate(params))))
    return {
        "train_loss": losses,
        "eval_loss": evals,
        "step_s": float(np.median(times[1:])) if len(times) > 1 else float(times[0]),
        "state_bytes": nbytes,
        "finite": bool(np.all(np.isfinite(losses))),
    }


REFIT_PROBABILITIES = (1.0, 0.1, 0.03)


def refit_costs(
    params: dict[str, Any], batches: np.ndarray, heads: int, quick: bool
) -> dict[str, Any]:
    """Kron's step time at a fixed refit probability against AdamW's, interleaved in blocks
    (the median of the per-round ratios), and what its default schedule costs over a long run.

    Kron refits its preconditioner with probability p_t (1 for the first 500 steps, decaying to
    0.03 from step ~4,000), so a 600-step run times the refit at almost every step. A step's
    cost is linear in p (a common part plus p times the refit), so the two end points give the
    amortised ratio at the schedule's mean probability over 10,000 steps."""
    import gradtx
    from gradtx import contrib

    def runner(tx: Any) -> list[Any]:
        p = jax.tree.map(jnp.array, params)  # a copy: the step donates it
        return [make_step(tx, heads), p, tx.init(p)]

    txs = {"adamw": gradtx.adamw(1e-3, weight_decay=0.01)}
    lo, hi = REFIT_PROBABILITIES[-1], REFIT_PROBABILITIES[0]
    # --quick times the two end points the amortised ratio needs (each is a compilation of its own)
    for prob in (hi, lo) if quick else REFIT_PROBABILITIES:
        txs[f"p={prob:g}"] = contrib.kron(
            1e-3, weight_decay=0.01, preconditioner_update_probability=prob
        )
    runners = {name: runner(tx) for name, tx in txs.items()}
    steps, rounds = (2, 2) if quick else (20, 7)

    def block(r: list[Any], n: int) -> float:
        f, p, s = r
        t0 = time.perf_counter()
        for i in range(n):
            p, s, loss = f(p, s, batches[i % len(batches)])
        jax.block_until_ready(loss)
        r[1], r[2] = p, s
        return (time.perf_counter() - t0) / n

    for r in runners.values():
        block(r, 2)  # compile
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, r in runners.items():
            times[name].append(block(r, steps))
    base = np.asarray(times["adamw"])
    ratios = {
        name: float(np.median(np.asarray(t) / base)) for name, t in times.items() if name != "adamw"
    }
    schedule = contrib.precond_update_prob_schedule()
    mean_p = float(np.mean(np.asarray(jax.vmap(schedule)(jnp.arange(10_000)))))
    r_lo, r_hi = ratios[f"p={lo:g}"], ratios[f"p={hi:g}"]
    amortised = r_lo + (mean_p - lo) / (hi - lo) * (r_hi - r_lo)
    return {
        "ratios": ratios,
        "adamw_step_ms": float(np.median(base)) * 1e3,
        "mean_probability_10k": mean_p,
        "amortised_ratio_10k": amortised,
        "rounds": rounds,
        "steps_per_block": steps,
    }


def run(
    quick: bool,
    names: list[str] | None,
    log: Callable[[str], None],
    steps: int | None = None,
    seed: int = 0,
    learning_rates: tuple[float, ...] | None = None,
) -> dict[str, Any]:
    """The benchmark; `steps` replaces the configuration's step count, `seed` != 0 draws other
    initial params, training text and batches (the held-out text stays), and `learning_rates`
    replaces every optimizer's sweep."""
    cfg = dict(QUICK if quick else FULL)
    if steps is not None:
        cfg["steps"] = steps
    alphabet = _alphabet()
    n_train = cfg["steps"] * cfg["batch"] * (cfg["context"] + 1) * 2
    train_text = corpus(max(n_train, 20_000), seed=1 + 10 * seed)
    eval_text = corpus(20_000, seed=2)
    train_batches = _batches(
        train_text, alphabet, cfg["steps"], cfg["batch"], cfg["context"], 3 + 10 * seed
    )
    eval_batches = _batches(eval_text, alphabet, EVAL_BATCHES, cfg["batch"], cfg["context"], 4)
    params = init_params(cfg, len(alphabet), seed=seed)
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    table = optimizers()
    unknown = sorted(set(names or ()) - set(table))
    if unknown:
        raise SystemExit(f"--optimizer: unknown {unknown}; choose from {sorted(table)}")
    chosen = [n for n in table if not names or n in names]
    if "adamw" not in chosen:
        chosen.insert(0, "adamw")  # the baseline of the ratios and of the target loss
    eval_every = EVAL_EVERY["quick" if quick else "full"]
    heads = cfg["heads"]
    # the held-out loss: one program for every run (it depends on the params' shapes only)
    evaluate = jax.jit(lambda p: jnp.mean(jax.vmap(lambda b: loss_fn(p, b, heads))(eval_batches)))
    runs: dict[str, list[dict[str, Any]]] = {}
    for name in chosen:
        make, rates = table[name]
        if learning_rates is not None:
            rates = learning_rates
        elif quick:
            rates = rates[1:2]
        for lr in rates:
            tx = make(_schedule(lr, cfg["steps"]))
            r = train(tx, params, train_batches, evaluate, heads, eval_every)
            r["learning_rate"] = lr
            runs.setdefault(name, []).append(r)
            log(
                f"{name:>10} lr={lr:<8g} final held-out loss {r['eval_loss'][-1][1]:.4f}  "
                f"step {r['step_s'] * 1e3:.2f} ms"
            )

    def final(r: dict[str, Any]) -> float:
        v = r["eval_loss"][-1][1]
        return v if np.isfinite(v) else float("inf")

    best = {name: min(rs, key=final) for name, rs in runs.items()}
    target = final(best["adamw"])
    rows = []
    for name, r in best.items():
        reached = [s for s, v in r["eval_loss"] if v <= target]
        rows.append(
            {
                "optimizer": name,
                "learning_rate": r["learning_rate"],
                "final_loss": final(r),
                "steps_to_target": reached[0] if reached else None,
                "step_time_ratio": r["step_s"] / best["adamw"]["step_s"],
                "step_ms": r["step_s"] * 1e3,
                "state_bytes_per_param": r["state_bytes"] / n_params,
                "swept": [x["learning_rate"] for x in runs[name]],
            }
        )
    refit = None
    if "kron" in chosen:
        log("timing Kron's step at fixed refit probabilities")
        refit = refit_costs(params, train_batches, cfg["heads"], quick)
    return {
        "config": dict(cfg),
        "parameters": n_params,
        "kron_refit": refit,
        "target_loss": target,
        "rows": rows,
        "curves": {n: r["eval_loss"] for n, r in best.items()},
        "train_curves": {n: r["train_loss"] for n, r in best.items()},
        "machine": machine_facts(),
    }


def markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"Character-level transformer ({cfg['layers']} layers, width {cfg['width']}, "
        f"{cfg['heads']} heads, context {cfg['context']}; {result['parameters']:,} parameters), "
        f"{cfg['steps']} steps of batch {cfg['batch']}; target loss = AdamW's best final "
        f"held-out loss, {result['target_loss']:.4f}.",
        "",
        "| optimizer | best peak lr (swept) | final held-out loss | steps to AdamW's loss "
        "| step time vs AdamW | state bytes / param |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        steps = "—" if r["steps_to_target"] is None else str(r["steps_to_target"])
        swept = ", ".join(f"{x:g}" for x in r["swept"])
        lines.append(
            f"| {r['optimizer']} | {r['learning_rate']:g} ({swept}) | {r['final_loss']:.4f} "
            f"| {steps} | {r['step_time_ratio']:.2f}× | {r['state_bytes_per_param']:.1f} |"
        )
    refit = result.get("kron_refit")
    if refit:
        points = ", ".join(f"{k}: {v:.2f}×" for k, v in refit["ratios"].items())
        lines += [
            "",
            f"Kron's step against AdamW's at a fixed refit probability (median of "
            f"{refit['rounds']} interleaved rounds of {refit['steps_per_block']} steps): "
            f"{points}. Its default schedule's mean probability over 10,000 steps is "
            f"{refit['mean_probability_10k']:.3f}, so such a run costs about "
            f"{refit['amortised_ratio_10k']:.2f}× AdamW's per step.",
        ]
    return "\n".join(lines)


def write_png(result: dict[str, Any], path: str) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, (ax_train, ax_eval) = plt.subplots(1, 2, figsize=(11, 4))
    for name, losses in result["train_curves"].items():
        k = max(1, len(losses) // 50)
        smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
        ax_train.plot(np.arange(len(smooth)) + k, smooth, label=name)
    for name, curve in result["curves"].items():
        steps, values = zip(*curve, strict=True)
        ax_eval.plot(steps, values, marker=".", label=name)
    ax_eval.axhline(result["target_loss"], color="grey", linestyle=":", label="AdamW's final")
    for ax, title in ((ax_train, "training loss (smoothed)"), (ax_eval, "held-out loss")):
        ax.set_xlabel("step")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    ax_eval.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(quick: bool, out: str, names: list[str] | None, log: Callable[[str], None]) -> int:
    result = run(quick, names, log)
    write_result(result, markdown(result), out, "quality")
    write_png(result, os.path.join(out, "quality.png"))
    return 0
