"""experiments.common.progress_logger: the study binaries' per-chunk progress line."""

import logging

from experiments import common


def test_progress_line_by_hand(monkeypatch, caplog):
  clock = iter([100.0, 105.0, 125.0])  # made, first report (after compile), second report
  monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
  log = common.progress_logger("fedemd seed 1", size=2)
  with caplog.at_level(logging.INFO):
    log(10, 100, {"test_accuracy": 0.5})
    # 20 rounds in the 20 s since the first report: 1 s a round, 70 rounds left.
    log(30, 100, {"test_accuracy": 0.8125})
  lines = [r.getMessage() for r in caplog.records]
  assert lines == [
    "fedemd seed 1 (+1 more): round 10/100 after 5 s, about ? left, test accuracy 50.00 %",
    "fedemd seed 1 (+1 more): round 30/100 after 25 s, about 70 s left, test accuracy 81.25 %",
  ]


def test_progress_line_without_accuracy(monkeypatch, caplog):
  clock = iter([0.0, 2.0])
  monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
  with caplog.at_level(logging.INFO):
    common.progress_logger("full seed 0")(5, 5, {"train_loss": 1.0})
  assert caplog.records[-1].getMessage() == "full seed 0 (+0 more): round 5/5 after 2 s, about ? left"
