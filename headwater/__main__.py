"""`python -m headwater` is the `headwater` command."""

from headwater.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
