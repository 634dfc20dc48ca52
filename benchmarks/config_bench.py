"""`from_config` timing: how long reading, validating and building a 30-line config takes,
outside compilation (issue 12 asks for under 50 ms).

Run with `python benchmarks/config_bench.py [--repeats N]` from the repository root. It times,
in one process: the first call (which also imports PyYAML and fills the registry by discovery),
then `--repeats` calls each of `from_config` on a YAML file, on the same text, on the parsed dict,
the validation alone (`load_config`), and `gradtx.from_nnabla` / `gradtx.from_returnn` on their
example configs; medians and the 90th percentiles are printed. Nothing is compiled: building
calls the factories, `jax.jit` compiles at the first step, which is the same for a hand-built
optimizer (tests/config/test_roundtrip.py checks that the compiled programs are identical).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG = """\
# a 30-line experiment config: every section
optimizer:
  name: adamw
  learning_rate:
    name: warmup_cosine_decay
    init_value: 0.0
    peak_value: 3.0e-4
    warmup_steps: 500
    decay_steps: 20000
    end_value: 1.0e-5
  b1: 0.9
  b2: 0.95
  eps: 1.0e-8
  weight_decay: 0.1
  mask: "!**/bias"
clip:
  global_norm: 1.0
  value: 10.0
noise: {eta: 0.01, gamma: 0.55, seed: 0}
lr_multipliers:
  rules:
    "embed/**": 0.1
  default: 1.0
  strict: false
nonfinite:
  action: skip
  max_consecutive_errors: 10
accumulate: {k: 4, average: true}
ema:
  decay: 0.999
"""


def _time(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return statistics.median(samples) * 1e3, samples[int(0.9 * (len(samples) - 1))] * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    assert len(CONFIG.splitlines()) == 30

    start = time.perf_counter()
    import gradtx

    import_ms = (time.perf_counter() - start) * 1e3
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "experiment.yaml"
        path.write_text(CONFIG)
        start = time.perf_counter()
        gradtx.config.from_config(path)
        first_ms = (time.perf_counter() - start) * 1e3
        parsed = gradtx.config.load_config(CONFIG)
        examples = ROOT / "examples" / "configs"
        cases = {
            "from_config(yaml file)": lambda: gradtx.config.from_config(path),
            "from_config(yaml string)": lambda: gradtx.config.from_config(CONFIG),
            "from_config(dict)": lambda: gradtx.config.from_config(parsed),
            "load_config(dict) (validation only)": lambda: gradtx.config.load_config(parsed),
            "from_nnabla(example yaml)": lambda: gradtx.nnabla.from_nnabla(
                examples / "nnabla_adam.yaml"
            ),
            "from_returnn(example yaml)": lambda: gradtx.returnn.from_returnn(
                examples / "returnn_adam.yaml"
            ),
        }
        print(f"import gradtx: {import_ms:.0f} ms (not part of from_config)")
        print(f"first from_config (imports PyYAML, fills the registry): {first_ms:.1f} ms")
        print(f"{'case':40s} {'median ms':>10s} {'p90 ms':>8s}   ({args.repeats} calls each)")
        for name, fn in cases.items():
            median, p90 = _time(fn, args.repeats)
            print(f"{name:40s} {median:10.2f} {p90:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
