"""The ``sjlt`` command line (placeholder until the batch CLI lands)."""


def main(argv=None) -> int:
    raise SystemExit("the sjlt command line is not built yet")
