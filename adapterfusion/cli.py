"""Command-line entry point. A thin layer over the Python API."""
from __future__ import annotations

import argparse
import sys

import adapterfusion as af


def _info(_: argparse.Namespace) -> int:
    print(f"adapterfusion {af.__version__}")
    try:
        print(f"default encoder: {af.default_encoder_path()}")
    except af.DefaultModelMissingError as error:
        print(f"default encoder: not installed ({error})")
    print("supported architectures (config.model_type): " + ", ".join(sorted(af.ARCHITECTURES)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="adapterfusion", description="Adapters and AdapterFusion for HF encoders")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="version, default encoder and supported architectures").set_defaults(run=_info)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except af.AdapterFusionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
