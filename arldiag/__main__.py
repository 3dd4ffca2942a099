"""`python -m arldiag ...`: the same command line as the `arldiag` script (arldiag/cli.py)."""
from arldiag.cli import main

raise SystemExit(main())
