"""`python -m arldiag ...`: the same command line as the `arldiag` script (arldiag/cli.py)."""
from arldiag.cli import main

if __name__ == "__main__":  # importing the module (pkgutil walks, the wheel's import check) runs nothing
    raise SystemExit(main())
