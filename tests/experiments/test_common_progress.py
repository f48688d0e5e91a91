"""experiments.common: the study binaries' progress line and how many programs run at once."""

import logging

from experiments import common


def test_progress_line_by_hand(monkeypatch, caplog):
  clock = iter([100.0, 105.0, 125.0])  # made, first report (after compile), second report
  monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
  log = common.progress_logger("fedemd seed 1", size=2)
  with caplog.at_level(logging.INFO, logger="absl"):  # absl's level may be WARNING by now
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
  with caplog.at_level(logging.INFO, logger="absl"):  # absl's level may be WARNING by now
    common.progress_logger("full seed 0")(5, 5, {"train_loss": 1.0})
  assert (
    caplog.records[-1].getMessage() == "full seed 0 (+0 more): round 5/5 after 2 s, about ? left"
  )


def test_one_program_at_a_time_on_a_mesh():
  assert common.default_workers(1) == 2  # compile one while the other runs
  assert common.default_workers(2) == 1  # collectives would wait on the other program
  assert common.default_workers(8) == 1
