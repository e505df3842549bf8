def main() -> None:
    raise SystemExit("adapterfusion CLI: not implemented yet")
