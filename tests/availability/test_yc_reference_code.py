"""YC's ``schedule="reference_code"``: the FedGS authors' systemic simulator, values by hand.

Facts from WwZzz/FedGS, ``utils/systemic_simulator.py``, branch ``YCycle`` of
``init_network_mode``:
- "T = 10 * num_label", num_label = the number of distinct labels of the server's test
  data (10 on Fashion-MNIST, so T = 100);
- each client's regions are [lb / num_label, (lb + 1) / num_label] for every label lb of
  its train and validation data;
- "r = 1.0*(1+server.current_round%T)/T" and the client is boosted when
  "a[0]<r<=a[1]" for one of its regions (left-open, right-closed);
- "network_active_rate = alpha*ic + (1-alpha)".
``algorithm/fedbase.py`` runs ``for round in range(self.num_rounds+1)`` with
``current_round = round``: its first sampling is at current_round 0, our round t = 0.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.availability.yc import phase_label
from fedjax_sel.core.types import ClientInfo

C = 10
# client k holds labels k and (k + 3) % 10
HELD = np.zeros((C, C), np.int32)
for _k in range(C):
  HELD[_k, _k] = HELD[_k, (_k + 3) % C] = 50
INFO = ClientInfo(num_examples=jnp.full((C,), 100, jnp.int32), label_counts=jnp.asarray(HELD))


def probs_at(model, rounds):
  state = model.init(jax.random.PRNGKey(0), INFO)
  return np.stack([np.asarray(model.probs(state, jnp.int32(t))) for t in rounds])


# round t -> the clients boosted, worked out by hand from r = (1 + t % 100) / 100 and the
# regions (lb / 10, (lb + 1) / 10]: t = 0 -> r = 0.01, label 0 (clients 0 and 7); t = 9 ->
# r = 0.10, still label 0 (right-closed); t = 10 -> r = 0.11, label 1 (clients 1, 8);
# t = 99 -> r = 1.00, label 9 (clients 9, 6); t = 100 -> r = 0.01 again; t = 259 -> r =
# 0.60, label 5 (clients 5, 2); t = 260 -> r = 0.61, label 6 (clients 6, 3).
BOOSTED = {0: {0, 7}, 9: {0, 7}, 10: {1, 8}, 99: {9, 6}, 100: {0, 7}, 259: {5, 2}, 260: {6, 3}}


def test_reference_code_period_and_bins_by_hand():
  beta = 0.9
  rounds = sorted(BOOSTED)
  got = probs_at(availability.make("yc", beta=beta, schedule="reference_code"), rounds)
  for row, t in zip(got, rounds):
    want = [1.0 if k in BOOSTED[t] else 1.0 - beta for k in range(C)]
    np.testing.assert_allclose(row, want, rtol=1e-6, err_msg=f"round {t}")


def test_reference_code_boosts_each_label_ten_rounds_per_period_and_never_nobody():
  got = probs_at(availability.make("yc", beta=0.9, schedule="reference_code"), range(200))
  boosted = got > 0.5
  # every round boosts exactly the two holders of one label (no empty round, unlike Table 1)
  assert (boosted.sum(axis=1) == 2).all()
  # each client holds 2 labels x 10 rounds per label in each period of 100 rounds
  np.testing.assert_array_equal(boosted[:100].sum(axis=0), 20)
  np.testing.assert_array_equal(boosted[:100], boosted[100:])  # period T = 10 C = 100
  # label y's window is rounds 10 y .. 10 y + 9: client 4 (labels 4, 7)
  want = np.zeros(100, bool)
  want[40:50] = want[70:80] = True
  np.testing.assert_array_equal(boosted[:100, 4], want)


def test_reference_code_edges_differ_from_table_1():
  # r = 0.10 (t = 9, T = 100, C = 10): Table 1's [y/C, (y+1)/C) puts it in label 1, the
  # code's (y/C, (y+1)/C] in label 0; r = 1 (t = 99): Table 1 has no label, the code 9.
  for t, paper, code in ((9, 1, 0), (99, 10, 9), (0, 0, 0), (10, 1, 1)):
    assert int(phase_label(jnp.int32(t), 100, 10, "paper")) == paper
    assert int(phase_label(jnp.int32(t), 100, 10, "reference_code")) == code


def test_reference_code_with_an_explicit_period():
  # T = 8, C = 4: r = s / 8 for s = 1 + t % 8 in bins (y/4, (y+1)/4]: s = 1, 2 -> 0;
  # 3, 4 -> 1; 5, 6 -> 2; 7, 8 -> 3 (by hand: 0.125, 0.25 | 0.375, 0.5 | ...).
  want = [0, 0, 1, 1, 2, 2, 3, 3, 0]
  got = [int(phase_label(jnp.int32(t), 8, 4, "reference_code")) for t in range(9)]
  assert got == want


def test_paper_schedule_and_default_period_unchanged():
  # the default stays Table 1 with T = 24: round 23 (r = 1) boosts nobody
  paper = probs_at(availability.make("yc", beta=0.9), [0, 23, 24])
  explicit = probs_at(availability.make("yc", beta=0.9, period=24, schedule="paper"), [0, 23, 24])
  np.testing.assert_array_equal(paper, explicit)
  np.testing.assert_allclose(paper[1], 0.1, rtol=1e-6)


def test_schedule_is_validated():
  with pytest.raises(ValueError, match="schedule='code'; allowed: paper, reference_code"):
    availability.make("yc", schedule="code")
  with pytest.raises(ValueError, match="period=0"):
    availability.make("yc", schedule="reference_code", period=0)
