"""Run against run (`arldiag diff`): where two runs part and what moved first. ``parting`` is the rule,
``compare`` the comparison of two runs, ``tokens`` the token window, ``settings`` the run.json delta."""
