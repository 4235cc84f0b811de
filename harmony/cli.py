"""`harmony` command line: one subcommand per stage. Each stage module exposes
`add_arguments(parser)` and `main(args) -> int`; this file only wires them together."""
from __future__ import annotations

import argparse
import importlib
import sys

# (subcommand, module, one-line help). Order = the pipeline's order.
SUBCOMMANDS = [
    ("models", "harmony.models.cli", "list the model zoo with parameter and vLayer counts"),
    ("decompose", "harmony.decompose", "model name or user nn.Module -> model.json (chain of vLayers)"),
    ("profile", "harmony.profile", "model.json -> profile.json (per-vLayer time and memory per microbatch size)"),
    ("calibrate", "harmony.calibrate", "measure this machine's bandwidths and rates -> calibration.json"),
    ("schedule", "harmony.schedule.cli", "search the best schedule -> schedule.json, search.csv, trace.json.gz"),
    ("simulate", "harmony.schedule.simulate_cli", "simulate a schedule.json: time, memory, bytes, trace"),
    ("table1", "harmony.schedule.table1", "the paper's Table 1: search cost and chosen configurations"),
    ("run", "harmony.runtime.cli", "execute a schedule.json on GPUs (or CPU workers) -> run.jsonl"),
    ("baseline", "baselines.cli", "run a baseline system (swap-dp, swap-pp, fsdp-offload, zero-offload, resident)"),
    ("timeline", "harmony.timeline", "where a traced iteration's GPU time went, per rank, from a run.jsonl"),
    ("figure", "harmony.figures", "run records -> a figure's CSV, PNG and PDF"),
    ("check", "harmony.checks", "compare results against the paper's claims with tolerances"),
    ("env", "harmony.envcli", "print this machine's environment record (JSON)"),
    ("provenance", "harmony.provenance", "which commit's code made a run record (from its source tree hashes)"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harmony", description="Train DNNs larger than GPU memory: decompose a model into vLayers, profile "
        "it, search a schedule with the simulator, and run it with weights, gradients, optimizer state and "
        "activations swapped to host memory. One subcommand per stage, in pipeline order:",
        epilog="`harmony COMMAND --help` for each; docs/architecture.md for the stages and their files.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_text in SUBCOMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and (e.name == module or module.startswith(e.name + ".")):
                p.set_defaults(_missing=f"`harmony {name}` is not available in this build ({module} missing)")
                continue
            raise
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"error: {args._missing}", file=sys.stderr)
        return 2
    try:
        return int(args._main(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, KeyError, FileNotFoundError) as e:
        # Bad input: one clear line, no traceback (set HARMONY_DEBUG=1 for the traceback).
        import os
        if os.environ.get("HARMONY_DEBUG"):
            raise
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
