"""verl plugin entry point (``[project.entry-points."verl.plugins"]`` in pyproject.toml).

verl imports this module in every process that imports ``verl``; importing it registers arldiag's policy-loss
modes (``arldiag``, ``arldiag_<mode>``; see arldiag.collectors.verl_loss). This is the one arldiag module whose
import has an effect: that is what a verl plugin is. A failure here must not break verl, so it only warns.
"""
import warnings

try:
    from arldiag.collectors.verl_loss import register

    REGISTERED = register()
except Exception as _exc:  # noqa: BLE001
    REGISTERED = []
    warnings.warn(f"arldiag: could not register its verl loss modes ({type(_exc).__name__}: {_exc})",
                  RuntimeWarning, stacklevel=2)
