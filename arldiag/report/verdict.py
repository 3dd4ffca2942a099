"""The verdict lives in arldiag.verdict (one definition for the report, `ls`, the fleet row, the dashboard and
eval-detect, without the report's dependencies); this name is kept for code that imported it from here."""
from arldiag.verdict import (AT_RISK, COLLAPSED, DECLINED, HEALTHY, NO_SIGNAL, RECENT_ALERT_STEPS,  # noqa: F401
                             TOO_SHORT, VERDICTS, Verdict, alert_episode, detector_warmup, first_precursor,
                             first_state_step, is_lagging, max_state, registry_lagging, verdict)
