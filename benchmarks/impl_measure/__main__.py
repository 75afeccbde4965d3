"""``python -m benchmarks.impl_measure``: the command line (cli.main)."""

from benchmarks.impl_measure.cli import main

if __name__ == "__main__":
    main()
