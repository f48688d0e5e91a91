"""The order in which NumPy 1.x's ``argsort`` leaves ties: Fraboni et al.'s Algorithm 1 code.

The authors' Algorithm 1 orders clients by ``np.flip(np.argsort(weights))``; with equal
sizes every weight ties, so the clients are visited in the order NumPy's default argsort
leaves equal keys. NumPy 1.x (2021) ran its generic introsort (median-of-3 quicksort down to
16 elements, then insertion sort; not stable), which permutes ties; NumPy >= 1.26 on
AVX-512 machines (this one) dispatches to x86-simd-sort and returns them in id order.
``introsort_argsort`` re-implements that introsort's index moves (the algorithm, written
here from its description: Hoare partition around the median of three with strict
comparisons, largest part pushed, insertion sort below 16 elements) so that the one-class
study can lay its clients in the authors' visiting order (``client_order="by_label_numpy1"``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SMALL = 15  # partitions of more than SMALL + 1 elements are split; smaller ones insertion-sorted


def introsort_argsort(values: Sequence[float]) -> np.ndarray:
  """i64[n]: the indices that sort ``values``, ties left where NumPy 1.x's introsort leaves
  them (its depth-limited heapsort fallback is not reached at these sizes and not ported)."""
  v = list(values)
  t = list(range(len(v)))
  stack: list[tuple[int, int]] = []
  lo, hi = 0, len(v) - 1
  while True:
    while hi - lo > SMALL:
      mid = lo + ((hi - lo) >> 1)
      if v[t[mid]] < v[t[lo]]:
        t[mid], t[lo] = t[lo], t[mid]
      if v[t[hi]] < v[t[mid]]:
        t[hi], t[mid] = t[mid], t[hi]
      if v[t[mid]] < v[t[lo]]:
        t[mid], t[lo] = t[lo], t[mid]
      pivot = v[t[mid]]
      i, j = lo, hi - 1
      t[mid], t[j] = t[j], t[mid]
      while True:
        i += 1
        while v[t[i]] < pivot:
          i += 1
        j -= 1
        while pivot < v[t[j]]:
          j -= 1
        if i >= j:
          break
        t[i], t[j] = t[j], t[i]
      t[i], t[hi - 1] = t[hi - 1], t[i]
      if i - lo < hi - i:
        stack.append((i + 1, hi))
        hi = i - 1
      else:
        stack.append((lo, i - 1))
        lo = i + 1
    for i in range(lo + 1, hi + 1):
      k, j = t[i], i
      while j > lo and v[k] < v[t[j - 1]]:
        t[j] = t[j - 1]
        j -= 1
      t[j] = k
    if not stack:
      return np.asarray(t, np.int64)
    lo, hi = stack.pop()


def authors_alg1_visit_order(num_clients: int) -> np.ndarray:
  """i64[N]: the clients in the order the authors' Algorithm 1 visits N equal-size clients
  under NumPy 1.x (``np.flip(np.argsort(equal weights))``)."""
  return np.flip(introsort_argsort([1.0] * int(num_clients)))
