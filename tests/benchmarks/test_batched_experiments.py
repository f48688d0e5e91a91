"""Smoke test of benchmarks/batched_experiments (tiny settings; keys and the equality check)."""

import json

import pytest

from benchmarks import batched_experiments


@pytest.mark.slow  # ~50-100 s: a benchmark smoke test, run with -m slow
def test_quick_logreg_json(capsys):
  assert batched_experiments.main(["--json", "--quick", "--models=logreg"]) == 0
  records = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
  assert [r["k"] for r in records] == [1, 2]
  for r in records:
    # the benchmark refuses to time a batch whose experiments differ from the sequential runs
    assert r["max_abs_diff_map"] == 0.0  # map: bit for bit
    assert r["max_abs_diff_vmap"] <= 1e-5
    assert r["sequential_s"] > 0 and r["batched_map_s"] > 0 and r["batched_vmap_compile_s"] > 0
    assert r["memory_bytes"] is None or r["memory_bytes"] > 0
  if records[0]["memory_bytes"] is not None:
    assert records[1]["bytes_per_experiment"] > 0 and records[1]["largest_k_fits"] > 2
