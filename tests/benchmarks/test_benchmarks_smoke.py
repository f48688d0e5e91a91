"""Smoke tests of the benchmark scripts (tiny settings; JSON keys, no timing assertions)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import _common as C
from benchmarks import bf16_ops, eval_speed, pfl_setup, round_speed, scaling
from fedjax_sel.models.im2col import im2col_conv

ENGINE_KEYS = {
  "model",
  "clients_per_round",
  "local_epochs",
  "ours_s",
  "per_client_loop_s",
  "per_step_loop_s",
  "torch_loop_s",
  "useful_step_fraction",
  "useful_gflops",
  "matmul_gflops",
  "modes",
  "compile_s",
}


def _lines(capsys):
  return [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]


@pytest.mark.slow  # a benchmark smoke test of 40-60 s, run with -m slow
def test_round_speed_quick_logreg_json_keys(capsys):
  assert round_speed.main(["--json", "--quick", "--models=logreg", "--no_torch"]) == 0
  (record,) = _lines(capsys)
  assert ENGINE_KEYS <= set(record)
  assert record["torch_loop_s"] is None
  assert {"vmap", "map", "auto", "lanes_2"} <= set(record["modes"])
  assert record["kind_by_mode"]["auto"] == "lanes"  # dense model, one CPU device
  # every implementation was checked against the first mode before timing
  assert all(d <= 1e-4 for d in record["max_abs_diff"].values())
  assert 0.0 < record["useful_step_fraction"] <= 1.0
  assert record["useful_step_fraction_by_mode"]["map"] == 1.0


def test_padded_lane_steps_counts_sorted_chunks():
  # sorted [4, 3, 2, 1] in chunks of 2: 2 * 4 + 2 * 2 = 12 lane-steps; one chunk: 16
  steps = np.array([1, 4, 2, 3])
  assert round_speed._padded_lane_steps(steps, 2) == 12
  assert round_speed._padded_lane_steps(steps, 4) == 16


@pytest.mark.parametrize(
  "padding,strides", [("SAME", (1, 1)), ("VALID", (1, 1)), ("VALID", (2, 2))]
)
def test_im2col_conv_equals_lax_conv(padding, strides):
  kx, kw = jax.random.split(jax.random.PRNGKey(0))
  x = jax.random.normal(kx, (2, 9, 9, 3))
  w = jax.random.normal(kw, (5, 5, 3, 4))
  dn = ("NHWC", "HWIO", "NHWC")
  want = jax.lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=dn)
  got = im2col_conv(x, w, strides, padding, dimension_numbers=dn)
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)


def test_engine_batches_reproduce_engine_order():
  # the host loops' batches, replayed with plain SGD, give the engine's deltas exactly
  data = C.make_data("logreg", 3, seed=1, examples_per_client=23)
  model = C.make_model("logreg", data)
  params = model.init(jax.random.PRNGKey(0))
  cohort = np.arange(3, dtype=np.int32)
  key = jax.random.PRNGKey(5)
  batches = C.engine_batches(data, cohort, key, 10, 1)
  assert batches[2].tolist() == [3, 3, 3]
  trainer = C.build_trainer(model, data, 3, "vmap")
  out = trainer(params, jnp.asarray(cohort), jnp.ones(3, bool), key, jnp.float32(0.1), cohort)
  loop = C.make_per_step_loop(model, data, batches, 0.1)(params, cohort)
  assert C.tree_max_abs_diff(out.deltas, loop) <= 1e-6


def test_scaling_parts_in_process(tmp_path):
  args = scaling.parse_args(["--quick"])
  parts = scaling.measure_parts(10, args)
  quad = scaling.measure_quadratic(16, args)
  assert {f"{p}_s" for p in scaling.PARTS} | {"num_clients", "peak_rss_mb"} <= set(parts)
  assert parts["clients_per_round"] == 1 and parts["num_selected"] <= 1
  assert {"cosine_s", "build_3dg_s", "num_clients"} <= set(quad)
  scaling.plot([parts, quad], str(tmp_path / "scaling.png"))
  assert (tmp_path / "scaling.png").stat().st_size > 0


@pytest.mark.slow
def test_scaling_main_subprocesses(capsys, tmp_path):
  argv = ["--json", "--quick", "--ns=10", "--quadratic_ns=16"]
  assert scaling.main([*argv, f"--output_dir={tmp_path}"]) == 0
  parts, quad, accept = _lines(capsys)
  assert parts["kind"] == "parts" and quad["kind"] == "quadratic"
  assert {"wall_clock_s", "peak_rss_mb", "rounds"} <= set(accept) and accept["rounds"] == 3
  assert (tmp_path / "scaling.jsonl").read_text().count("\n") == 3


@pytest.mark.slow
def test_round_speed_quick_all_models(capsys):
  assert round_speed.main(["--json", "--quick", "--round_level"]) == 0
  records = _lines(capsys)
  assert [r["model"] for r in records if r["kind"] == "engine"] == list(round_speed.MODELS)
  assert all(ENGINE_KEYS <= set(r) for r in records if r["kind"] == "engine")
  assert {"round_s", "engine_s"} <= set(next(r for r in records if r["kind"] == "round"))


@pytest.mark.slow
def test_pfl_setup_quick(capsys):
  assert pfl_setup.main(["--json", "--quick", "--variants=pfl_simple_cnn_im2col"]) == 0
  (record,) = _lines(capsys)
  assert {"round_s", "projected_1500_rounds_s", "clients_per_round"} <= set(record)
  assert record["projected_1500_rounds_s"] == pytest.approx(1500 * record["round_s"])


def test_cpu_devices_flag_checks_its_value():
  with pytest.raises(SystemExit, match="--cpu_devices=0; allowed"):
    C.set_cpu_devices(0)
  # the backend of this process is already up: asking for what it has is fine, else a message
  C.set_cpu_devices(jax.device_count("cpu"))
  with pytest.raises(SystemExit, match="already started"):
    C.set_cpu_devices(jax.device_count("cpu") + 1)


def test_eval_speed_quick_json(capsys):
  assert eval_speed.main(["--json", "--quick", "--impls=auto,im2col"]) == 0
  (record,) = _lines(capsys)
  assert set(record["seconds"]) == {"auto_32", "im2col_32"}
  assert record["conv_impl_of"] == {"auto_32": "canonical", "im2col_32": "im2col"}
  # the im2col evaluation was checked against the canonical one before timing
  assert record["max_abs_loss_diff"]["im2col_32"] <= 1e-4
  assert record["gflop"] > 0 and record["matmul_gflops"] > 0
  with pytest.raises(SystemExit):
    eval_speed.parse_args(["--impls=fft"])


def test_round_speed_half_precision_prints_ratios_and_host_flags(capsys):
  from fedjax_sel import experiment

  assert round_speed.main(["--json", "--quick", "--half_precision", "--models=logreg"]) == 0
  (record,) = _lines(capsys)
  assert record["kind"] == "half_precision"
  for part in ("step", "cohort", "eval"):
    assert record[f"{part}_speedup"] > 0
    assert {f"{part}/float32", f"{part}/bfloat16"} <= set(record["seconds"])
  assert record["host"]["simd"] == experiment.cpu_info()["simd"]
  assert set(record["host"]["bf16_units"]) <= {"amx_bf16", "avx512_bf16"}
  # one round's deltas in bfloat16 compute stay within a few percent of float32's
  assert 0 < record["delta_rel_diff"]["bfloat16"] < 0.05


@pytest.mark.slow  # a benchmark smoke test of 40-60 s, run with -m slow
def test_bf16_ops_prints_every_family_with_ratios_and_host_flags(capsys):
  assert bf16_ops.main(["--json", "--quick", "--repeats=1"]) == 0
  (record,) = _lines(capsys)
  assert record["kind"] == "bf16_ops"
  assert set(record["host"]["bf16_units"]) <= {"amx_bf16", "avx512_bf16"}
  rows = {(r["family"], r["shape"].split()[0]): r for r in record["ops"]}
  assert {f for f, _ in rows} == {"matmul", "batched_matmul", "elementwise", "patches", "conv"}
  for r in record["ops"]:
    assert r["speedup"] == pytest.approx(r["float32_s"] / r["bfloat16_s"])
  # the uint16 bitcast moves the same bytes: its patches equal the float32 ones rounded to
  # bfloat16 (inputs are float32 normals; bfloat16 keeps 8 bits: relative error <= 2^-8)
  assert rows[("patches", "uint16")]["max_abs_diff"] <= 6 * 2.0**-8
  # a bfloat16 x bfloat16 matmul with float32 accumulation, K = 784 standard normal terms:
  # each product's rounding is <= 2^-7 relative, so the sum's error is a few units, not 0
  mm = [r for r in record["ops"] if r["family"] == "matmul"]
  assert all(0 < r["max_abs_diff"] < 2.0 for r in mm)
  with pytest.raises(SystemExit):
    bf16_ops.parse_args(["--repeats=0"])
