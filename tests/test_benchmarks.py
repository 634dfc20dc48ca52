"""The benchmark harness runs end to end on tiny sizes and writes its JSON, Markdown and PNG.

Only that it works is checked here; no test asserts on a time (benchmarks/README.md has the
figures)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.harness import Budget, Stats, triad_bandwidth
from benchmarks.report import markdown, write_all
from benchmarks.suite import run_suite
from benchmarks.workloads import WORKLOADS, TreeSpec, step_fn


@pytest.mark.subprocess
def test_quick_suite_writes_json_markdown_and_png(tmp_path):
    run = run_suite(
        quick=True,
        only=["adam", "accumulate4_adam"],
        trees=["2000x8k"],
        repeats=2,
        seconds=0.0,
        with_torch=False,
        log=lambda s: None,
    )
    paths = write_all(run, str(tmp_path))
    data = json.loads((tmp_path / "results.json").read_text())
    assert {r["workload"] for r in data["results"]} == {"adam", "accumulate4_adam"}
    for r in data["results"]:
        for key in ("donated", "undonated"):
            step = r["step"][key]
            assert step["gradtx"]["median"] > 0 and step["optax"]["median"] > 0
            assert step["ratio"]["n"] == 2
        assert r["build"]["gradtx"]["donated"]["compile_s"] > 0
        assert r["memory"]["gradtx"]["state_bytes_per_param"] > 0
    acc = next(r for r in data["results"] if r["workload"] == "accumulate4_adam")
    assert acc["step"]["donated"]["ratio_to_baseline"]["median"] > 0
    assert data["machine"]["jax"] and data["triad"]["reference_Bps"] > 0
    assert not data["torch"]["available"] and "--no-torch" in data["torch"]["note"]
    assert any("trace+compile" in t["target"] for t in data["summary"]["targets"])
    text = (tmp_path / "results.md").read_text()
    assert "| adam | 2000x8k |" in text and "not measured" in text
    if "png" in paths:
        assert (tmp_path / "ratios.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.subprocess
def test_cli_runs_one_workload(tmp_path, capsys):
    out = tmp_path / "cli"
    args = "--quick --only lion --tree 1x16M --repeats 1 --seconds 0 --no-torch --out"
    code = main([*args.split(), str(out)])
    assert code == 0
    assert (out / "results.json").exists()
    assert "| lion | 1x16M |" in capsys.readouterr().out


def test_unknown_workload_is_an_error():
    with pytest.raises(ValueError, match="unknown workload"):
        run_suite(quick=True, only=["nope"], with_torch=False, log=lambda s: None)


@pytest.mark.parametrize("workload", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_workloads_compute_the_same_step_in_both_libraries(workload):
    # The timing ratio compares like with like only if both libraries run the same update rule:
    # the same parameters after one timed block of `calls` steps (bf16 moments round
    # differently in the two libraries, hence the looser tolerance there).
    spec = TreeSpec("tiny", 3, (4, 8))
    params, grads = spec.params(), spec.grads()
    out = {}
    for lib in ("gradtx", "optax"):
        tx = workload.make(lib)
        step = jax.jit(step_fn(tx, lib))
        p, s = params, tx.init(params)
        for _ in range(2 * workload.calls):
            p, s = step(p, s, grads)
        out[lib] = p
    assert jax.tree.structure(out["gradtx"]) == jax.tree.structure(out["optax"])
    moved = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(jax.tree.leaves(out["gradtx"]), jax.tree.leaves(params), strict=True)
    )
    assert moved > 0.0, "the workload does not change the parameters"
    rtol = 1e-2 if "bf16" in workload.name else 1e-5
    for a, b in zip(jax.tree.leaves(out["gradtx"]), jax.tree.leaves(out["optax"]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=rtol * 1e-2)


def test_stats_and_triad():
    st = Stats.of([3.0, 1.0, 2.0, 4.0, 5.0])
    assert (st.median, st.q1, st.q3, st.n) == (3.0, 2.0, 4.0, 5)
    assert Stats.of([2.0]).q1 == 2.0
    tri = triad_bandwidth(4096, Budget(min_rounds=2, max_rounds=2, seconds=0.0, warmup=1))
    assert tri["xla"]["best_Bps"] > 0 and tri["numpy"]["best_Bps"] > 0
    assert tri["reference_Bps"] == max(tri["xla"]["best_Bps"], tri["numpy"]["best_Bps"])


def test_markdown_marks_unmet_targets():
    run = run_suite(
        quick=True,
        only=["adam"],
        trees=["1x16M"],
        repeats=1,
        seconds=0.0,
        with_torch=False,
        log=lambda s: None,
    )
    run["summary"]["targets"].append({"target": "x", "value": 2.0, "limit": 1.0, "met": False})
    assert "| x | 2.00 | 1.00 | **no** |" in markdown(run)


@pytest.mark.subprocess
def test_health_benchmark_runs_quick(tmp_path, capsys):
    code = main(["--health", "--quick", "--repeats", "2", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "health.json").read_text())
    variants = {r["variant"] for r in data["rows"]}
    assert {"optax", "gradtx", "with_metrics (global)", "with_metrics (per leaf)"} <= variants
    assert all(r["step_ms"] > 0 for r in data["rows"])
    assert "| with_metrics (per leaf) |" in (tmp_path / "health.md").read_text()


@pytest.mark.subprocess
def test_quality_benchmark_runs_quick(tmp_path, capsys):
    from benchmarks.quality import optimizers

    code = main(["--quality", "--quick", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "quality.json").read_text())
    rows = {r["optimizer"]: r for r in data["rows"]}
    assert set(rows) == set(optimizers())  # every optimizer of the table ran
    assert rows["adamw"]["step_time_ratio"] == 1.0
    assert rows["adamw"]["steps_to_target"] is not None  # AdamW reaches its own final loss
    for name, r in rows.items():
        assert np.isfinite(r["final_loss"]), name
        # none diverges: the final loss stays near the first held-out one (~log(28) = 3.33)
        assert r["final_loss"] < data["curves"][name][0][1] + 0.5, name
        assert r["state_bytes_per_param"] > 0, name
    assert "| adamw |" in (tmp_path / "quality.md").read_text()
    assert (tmp_path / "quality.png").stat().st_size > 0


def test_quality_corpus_is_deterministic_text_with_structure():
    from benchmarks.quality import corpus

    a, b = corpus(5000, seed=1), corpus(5000, seed=1)
    assert a == b and len(a) == 5000
    assert corpus(5000, seed=2) != a
    assert " plus " in a and " is " in a and " that " in a


@pytest.mark.subprocess
def test_leaves_benchmark_runs_quick(tmp_path, capsys):
    code = main(
        [
            "--leaves",
            "--quick",
            "--optimizer",
            "adamw",
            "--optimizer",
            "floors",
            "--layout",
            "equal",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    data = json.loads((tmp_path / "leaves.json").read_text())
    assert [r["leaves"] for r in data["rows"]] == [10, 30]
    for r in data["rows"]:
        for lib in ("gradtx", "optax"):
            assert r[lib]["compile_s"] > 0 and r[lib]["step_s"] > 0
            assert r[lib]["peak_bytes"] is None or r[lib]["peak_bytes"] > 0
        assert r["step_ratio"] > 0
    assert data["rows"][0]["gradtx"]["compile_growth"] == 1.0
    assert {f["floor"] for f in data["floors"]} == {"floor: per-leaf add", "floor: packed"}
    assert all(t["values"] == 60_000 for t in data["trees"])
    assert "| adamw | equal | 30 |" in (tmp_path / "leaves.md").read_text()
    assert (tmp_path / "leaves.png").stat().st_size > 0


def test_leaves_lengths_and_bad_arguments():
    from benchmarks.leaves import lengths

    assert lengths(4_200_000, 1000, "equal") == [4200] * 1000
    diff = lengths(4_200_000, 1000, "different")
    assert len(set(diff)) == 1000 and abs(sum(diff) - 4_200_000) <= 1000
    assert len(set(lengths(4_200_000, 3000, "different"))) == 3000
    with pytest.raises(SystemExit):
        main(["--leaves", "--leaf-counts", "10,x"])
    with pytest.raises(ValueError, match="unknown optimizer"):
        main(["--leaves", "--quick", "--optimizer", "nope"])


@pytest.mark.subprocess
def test_population_benchmark_runs_quick(tmp_path, capsys):
    code = main(["--population", "--quick", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "population.json").read_text())
    assert [r["model"] for r in data["rows"]] == [
        "MLP 2-32-32-4, batch 16",
        "demo MLP 2-64-64-4, batch 128",
    ]
    for r in data["rows"]:
        step_ms = r["throughput"]["step_ms"]
        assert set(step_ms) == {"population", "population, lax.map", "sequential", "optax", "floor"}
        assert all(v > 0 for v in step_ms.values())
        assert r["throughput"]["sequential/population"]["median"] > 0
        e2e = r["end_to_end"]
        for variant in ("population", "population, lax.map", "optax", "separate"):
            assert e2e[variant]["total_s"] >= e2e[variant]["first_step_s"] > 0, variant
        assert e2e["separate/population"] > 0
    assert len(data["targets"]) == 8
    assert "| MLP 2-32-32-4, batch 16 |" in (tmp_path / "population.md").read_text()


def test_population_grid_and_sequential_step_compile_once():
    """The sequential baseline reuses one compiled step for every run's hyperparameters (its
    premise), and the grid's first members are the corner of the 8 x 8 grid."""
    import gradtx
    from benchmarks.population import grid, problem, sequential_step

    assert grid(4) == ([3e-4, 3e-4, 1e-3, 1e-3], [0.0, 1e-4, 0.0, 1e-4])
    assert len(set(zip(*grid(64), strict=True))) == 64
    with pytest.raises(ValueError, match="at most 64 members"):
        grid(65)
    params, batches = problem((2, 8, 4), 4)
    tx = gradtx.adamw(1e-3, weight_decay=1e-4)
    hp = gradtx.sweep(tx, mode="zip", learning_rate=[1e-3, 1e-2], weight_decay=[0.0, 0.1])
    step = sequential_step(tx)
    for m in range(2):
        p, s = jax.tree.map(jnp.copy, params), tx.init(params)
        p, s = step(p, s, *batches[m], gradtx.population_member(hp, m))
    assert step._cache_size() == 1


@pytest.mark.subprocess
def test_lowbit_benchmark_runs_quick(tmp_path, capsys):
    code = main(["--lowbit", "--quick", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "lowbit.json").read_text())
    steps = data["steps"]
    rows = {r["variant"]: r for r in steps["rows"]}
    codecs = ("8-bit dynamic", "8-bit sqrt", "4-bit")
    assert {"float32", "bf16 moments", "floor: float32 adamw (bare)", *codecs} <= set(rows)
    for c in codecs:
        for floor in ("reuse scales", "fresh max", "codec floor"):
            assert rows[f"{c}: {floor}"]["ms"] > 0
        assert rows[c]["vs_codec_floor"]["median"] > 0
    b = steps["bytes"]
    assert b["float32"]["total"] == pytest.approx(8.0, abs=0.01)
    assert b["4-bit"]["mu_codes"] == b["4-bit"]["nu_codes"] == 0.5
    assert b["4-bit"]["total"] < b["8-bit sqrt"]["total"] < b["bf16 moments"]["total"]
    assert {r["piece"] for r in steps["pieces"]} >= {
        "4-bit: decode m, v",
        "8-bit sqrt: decode m, v",
    }
    lm = {r["variant"]: r for r in data["lm"]["rows"]}
    assert {"float32", "4-bit", "4-bit, bf16 params + int8 compensation"} <= set(lm)
    for name, r in lm.items():
        assert not r["nan"] and np.isfinite(r["mean_loss"]), name
    compensated = lm["4-bit, bf16 params + int8 compensation"]["memory"]
    assert compensated["residual"] == pytest.approx(1.0, abs=0.01)  # int8, every leaf is bf16
    assert compensated["persistent"] < lm["4-bit"]["memory"]["persistent"]
    # --quick quantizes two of the tiny model's matrices (the ones with >= min_size values)
    assert data["lm"]["quantized_leaves"] == ["['layer_0']['down']", "['layer_0']['up']"]
    assert (
        lm["4-bit"]["memory"]["optimizer_matrices"] < lm["float32"]["memory"]["optimizer_matrices"]
    )
    assert data["demo"]["quantized_leaves"] == ["['layer1']['kernel']"]
    assert all(np.isfinite(r["mean_loss"]) for r in data["demo"]["rows"])
    text = (tmp_path / "lowbit.md").read_text()
    assert "| 4-bit: codec floor |" in text and "| float32 |" in text
    with pytest.raises(SystemExit):
        main(["--lowbit", "--quick", "--part", "build"])


def test_lowbit_floors_compute_the_library_step():
    """The `fresh max` and `codec floor` steps of the lowbit benchmark compute what the
    library's quantized AdamW step computes (so the floors time the same work)."""
    from benchmarks import lowbit
    from gradtx.state import _quantize

    shape = (16, 256)
    p = jax.random.normal(jax.random.key(0), shape)
    g = 1e-2 * jax.random.normal(jax.random.key(1), shape)
    for codec in lowbit.CODECS:
        tx = lowbit._adamw(lowbit.LR, lowbit._spec(codec))
        state = tx.init(p)
        mu, nu = lowbit._moments(state)
        library, lib_p = lowbit._library_step(tx), jnp.copy(p)
        for _ in range(3):
            lib_p, state = library(lib_p, state, g)
        for kind in ("fresh", "roundtrip"):
            zero = [
                _quantize.encode(
                    jnp.zeros(shape), block_size=q.block_size, signed=q.signed, codec=q.codec
                )
                for q in (mu, nu)
            ]
            floor, fp, fs = lowbit._floor_step(kind), jnp.copy(p), (jnp.zeros((), jnp.int32), *zero)
            for _ in range(3):
                fp, fs = floor(fp, fs, g)
            np.testing.assert_allclose(fp, lib_p, atol=1e-6, err_msg=f"{codec} {kind}")
            for got, want in zip(fs[1:], lowbit._moments(state), strict=True):
                np.testing.assert_allclose(
                    _quantize.decode(got),
                    _quantize.decode(want),
                    rtol=1e-6,
                    atol=1e-12,
                    err_msg=f"{codec} {kind}",
                )


def test_comm_benchmark_runs_quick(tmp_path):
    code = main(["--comm", "--quick", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "comm.json").read_text())
    rows = {r["key"]: r for r in data["rows"]}
    assert set(rows) == {"dp-adamw", "streaming", "demo"}  # --quick's variants
    # data parallel: one float32 all-reduce of every gradient per step
    dp = rows["dp-adamw"]["bytes"]["compiled"]
    assert dp["per_step"] == dp["peak"] == 4 * data["parameters"]
    # Streaming DiLoCo (--quick: H = 4, F = 2, bf16): fragment 1 on step 2, fragment 0 on step
    # 4, nothing in between; XLA:CPU all-reduces in float32 what the lowered HLO has in bf16
    streaming = rows["streaming"]["bytes"]
    schedule = streaming["compiled"]["schedule"]
    assert schedule[0] == schedule[2] == 0 and sum(schedule) == dp["per_step"]
    assert 2 * streaming["lowered"]["per_step"] == streaming["compiled"]["per_step"]
    for key, r in rows.items():
        assert np.isfinite(r["final_loss"]), key
        assert r["final_loss"] < r["curve"][0][3] + 0.5, key  # none diverges
        if key != "dp-adamw":  # the counters say what the lowered HLO moves, step by step
            assert r["counter_matches_lowered_hlo"], key
    assert "| DP AdamW |" in (tmp_path / "comm.md").read_text()
    assert (tmp_path / "comm.png").stat().st_size > 0
