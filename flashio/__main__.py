"""``python -m flashio``: the same as the ``flashio`` command."""

from flashio.analysis.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
