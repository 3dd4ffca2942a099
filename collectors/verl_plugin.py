"""verl plugin entry point (``[project.entry-points."verl.plugins"]`` in pyproject.toml).

verl imports this module in every process that imports ``verl``; importing it

- registers arldiag's policy-loss modes (``arldiag``, ``arldiag_<mode>``; see arldiag.collectors.verl_loss): the
  workers' per-token side;
- wraps ``verl.utils.tracking.Tracking.log`` once (arldiag.collectors.verl_tracking): the driver's logged scalars
  (task score, response lengths, timing, validation) go to the same run, with the Monitor of arldiag.toml. Nothing
  is opened here: the driver's collector opens on the first ``log`` call with ``$ARLDIAG_RUN`` set, so the workers
  (which never call it) open none.

This is the one arldiag module whose import has an effect: that is what a verl plugin is. A failure here must not
break verl, so it only warns.
"""
import warnings

try:
    from arldiag.collectors.verl_loss import register

    REGISTERED = register()
except Exception as _exc:  # noqa: BLE001
    REGISTERED = []
    warnings.warn(f"arldiag: could not register its verl loss modes ({type(_exc).__name__}: {_exc})",
                  RuntimeWarning, stacklevel=2)

try:
    from arldiag.collectors.verl_tracking import install as _install_tracking

    _install_tracking()
    TRACKING = True
except Exception as _exc:  # noqa: BLE001
    TRACKING = False
    warnings.warn(f"arldiag: could not hook verl's Tracking.log; the driver's scalars are not recorded live "
                  f"({type(_exc).__name__}: {_exc})", RuntimeWarning, stacklevel=2)
