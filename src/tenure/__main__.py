"""`python -m tenure`: the command line."""

from tenure.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
