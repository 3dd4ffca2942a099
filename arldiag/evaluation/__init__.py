"""How well the detectors warn, and the calibration that writes the shipped ``arldiag/detectors/calibrated.json``.

Behind `arldiag eval-detect` and `arldiag calibrate` (arldiag/commands/); benchmarks/ keeps thin scripts over it.

- ``scoring.py``: episodes, lead time, false alarms, recall and the NAB-style score of an alert timeline;
- ``evaluate.py``: ``evaluate(run)``: every run replayed, labelled (or a labels file) and scored;
- ``precursors.py``: the step metrics that moved most before a collapse;
- ``calibrate_token.py``: the token profile's fit on the reference trainer's dev runs (hysteresis grid, greedy
  demotions, the learned risk's logistic fit with scipy), held-out scoring, the default model;
- ``calibrate_steps.py``: the step-scalar profile's fit on labelled imported runs;
- ``results.py``: the generated detection sections of the docs; ``peer_rlwatch.py``: rlwatch's defaults on the
  same runs; ``ceiling.py``: the one-metric zero-false-alarm ceiling.

Importing this package loads nothing. The collapse label it scores against is ``arldiag.label``, below both this
package and ``arldiag.detectors`` (``detect`` reports the label too).
"""
