"""`python -m benchmarks`: run the suite, print the table, write JSON, Markdown and a PNG."""

from __future__ import annotations

import argparse
import sys

import jax

from .report import markdown, write_all
from .workloads import WORKLOAD_NAMES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="gradtx vs Optax step, build and memory figures."
    )
    parser.add_argument("--quick", action="store_true", help="tiny trees and few repeats")
    parser.add_argument(
        "--only",
        action="append",
        choices=WORKLOAD_NAMES,
        metavar="WORKLOAD",
        help=f"run only this workload (repeatable): {', '.join(WORKLOAD_NAMES)}",
    )
    parser.add_argument(
        "--tree", action="append", help="run only this tree (repeatable): 1x16M, 200x80k, 2000x8k"
    )
    parser.add_argument("--repeats", type=int, help="at most this many timed rounds per case")
    parser.add_argument("--seconds", type=float, help="time budget per case (after min rounds)")
    parser.add_argument("--no-torch", action="store_true", help="skip torch.optim even if present")
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument(
        "--checkpoint",
        action="store_true",
        help="run only the checkpoint save/load benchmark (vs numpy.save / numpy.load)",
    )
    parser.add_argument(
        "--zero1",
        action="store_true",
        help="run only the ZeRO-1 vs replicated optimizer-state benchmark (8 host devices)",
    )
    parser.add_argument(
        "--matrix",
        action="store_true",
        help="run only the matrix-optimizer benchmark on FSDP-sharded params (collective bytes "
        "per step from the compiled HLO, step times sharded and on one device, Optax's muon; "
        "Newton-Schulz orthogonality error per iteration; 8 host devices)",
    )
    parser.add_argument(
        "--comm",
        action="store_true",
        help="run only the training-across-slow-links benchmark (data-parallel AdamW against "
        "DiLoCo, Streaming DiLoCo and DeMo on 8 replicas of the quality language model: held-out "
        "loss against the collective bytes of the compiled step; 8 host devices)",
    )
    parser.add_argument(
        "--quantized",
        action="store_true",
        help="run only the 8-bit optimizer state benchmark (float32 / bf16 / 8-bit Adam)",
    )
    parser.add_argument(
        "--lowbit",
        action="store_true",
        help="run only the low-bit training-state benchmark (float32 / bf16 / 8-bit / 4-bit "
        "AdamW step times against the codecs' floors, state bytes, training quality with "
        "bf16 params and compensation)",
    )
    parser.add_argument(
        "--health",
        action="store_true",
        help="run only the training-health overhead benchmark (with_metrics, skip_on_spikes, "
        "located apply_if_finite in an MLP training step)",
    )
    parser.add_argument(
        "--population",
        action="store_true",
        help="run only the population benchmark (64 adamw members in one vmapped program vs 64 "
        "sequential runs, vs 64 separately compiled runs end to end, vs Optax's vmapped "
        "inject_hyperparams)",
    )
    parser.add_argument(
        "--quality",
        action="store_true",
        help="run only the training-quality benchmark (matrix optimizers and the 2025 "
        "first-order set on a small transformer language model)",
    )
    parser.add_argument(
        "--leaves",
        action="store_true",
        help="run only the leaf-count benchmark (build and step cost of 4.2M values split into "
        "10 .. 3000 leaves, gradtx vs Optax, with per-leaf and packed floors)",
    )
    parser.add_argument(
        "--leaf-counts",
        metavar="N,N,...",
        help="with --leaves: only these numbers of leaves (comma-separated, e.g. 10,100)",
    )
    parser.add_argument(
        "--layout",
        action="append",
        choices=("equal", "different"),
        help="with --leaves: only this layout of leaf lengths (repeatable)",
    )
    parser.add_argument(
        "--optimizer",
        action="append",
        metavar="NAME",
        help="with --quality: run only this optimizer (repeatable; AdamW always runs); with "
        "--leaves: only this optimizer (repeatable; 'floors' for the two floor rows); with "
        "--comm: only this variant (repeatable; dp-adamw always runs): dp-adamw, diloco-h10, "
        "diloco-h50, streaming, diloco-4bit, demo",
    )
    parser.add_argument(
        "--steps", type=int, help="with --comm: training steps of every run (default 600)"
    )
    parser.add_argument(
        "--seeds", type=int, help="with --comm: seeds of each variant's best rate (default 3)"
    )
    parser.add_argument(
        "--part",
        action="append",
        choices=("steps", "build", "quality"),
        help="with --quantized: run only this part (repeatable): step times, build times vs "
        "the number of leaves, training quality; with --lowbit: steps or quality",
    )
    donation = parser.add_mutually_exclusive_group()
    donation.add_argument(
        "--donated-only",
        action="store_true",
        help="with --quantized: time only the donated step (each 8-bit build of the 2000-leaf "
        "tree takes minutes)",
    )
    donation.add_argument(
        "--undonated-only",
        action="store_true",
        help="with --quantized: time only the undonated step",
    )
    args = parser.parse_args(argv)
    # Build times are measured: every compile is XLA's, never a load from a persistent
    # compilation cache the environment names (JAX_COMPILATION_CACHE_DIR; `make pytest` sets one).
    # The flag is restored on return (tests/test_benchmarks.py calls this in-process).
    cache_was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        return _run(parser, args)
    finally:
        jax.config.update("jax_enable_compilation_cache", cache_was)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.lowbit:
        from .lowbit import PARTS as LOWBIT_PARTS
        from .lowbit import main as lowbit_main

        if args.part and not set(args.part) <= set(LOWBIT_PARTS):
            parser.error(f"--lowbit: --part takes {' or '.join(LOWBIT_PARTS)}, got {args.part}")
        return lowbit_main(
            quick=args.quick,
            out=args.out,
            parts=args.part,
            rounds=args.repeats,
            log=lambda s: print(s, flush=True),
        )
    if args.quantized:
        from .quantized import main as quantized_main

        return quantized_main(
            quick=args.quick,
            out=args.out,
            log=lambda s: print(s, flush=True),
            trees=args.tree,
            parts=args.part,
            donations=(True,)
            if args.donated_only
            else (False,)
            if args.undonated_only
            else (True, False),
        )
    if args.leaves:
        from .leaves import main as leaves_main

        counts = None
        if args.leaf_counts:
            try:
                counts = [int(c) for c in args.leaf_counts.split(",") if c.strip()]
            except ValueError:
                parser.error(
                    f"--leaf-counts: integers separated by commas, not {args.leaf_counts!r}"
                )
        return leaves_main(
            quick=args.quick,
            out=args.out,
            log=lambda s: print(s, flush=True),
            counts=counts,
            selected=args.optimizer,
            layouts=args.layout,
            rounds=args.repeats,
        )
    if args.quality:
        from .quality import main as quality_main

        return quality_main(
            quick=args.quick, out=args.out, names=args.optimizer, log=lambda s: print(s, flush=True)
        )
    if args.population:
        from .population import main as population_main

        return population_main(
            quick=args.quick, out=args.out, rounds=args.repeats, log=lambda s: print(s, flush=True)
        )
    if args.health:
        from .health import main as health_main

        return health_main(
            quick=args.quick, out=args.out, rounds=args.repeats, log=lambda s: print(s, flush=True)
        )
    if args.comm:
        from .comm import main as comm_main

        return comm_main(
            quick=args.quick,
            out=args.out,
            log=lambda s: print(s, flush=True),
            steps=args.steps,
            seeds=args.seeds,
            only=args.optimizer,
        )
    if args.matrix:
        from .matrix import main as matrix_main

        return matrix_main(quick=args.quick, out=args.out, rounds=args.repeats)
    if args.zero1:
        from .zero1 import main as zero1_main

        return zero1_main(quick=args.quick, out=args.out, rounds=args.repeats)
    if args.checkpoint:
        from .checkpoint import main as checkpoint_main

        return checkpoint_main(quick=args.quick, out=args.out, rounds=args.repeats)

    from .suite import run_suite

    run = run_suite(
        quick=args.quick,
        only=args.only,
        trees=args.tree,
        repeats=args.repeats,
        seconds=args.seconds,
        with_torch=not args.no_torch,
        log=lambda s: print(s, flush=True),
    )
    paths = write_all(run, args.out)
    print()
    print(markdown(run))
    print("wrote " + ", ".join(paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
