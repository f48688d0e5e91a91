"""Which experiments can share one compiled program (``run_batch``): their configs may differ
only in seeds, output folders and float hyper-parameters that can be traced."""

from __future__ import annotations

from typing import Any

import ml_collections

from fedjax_sel import availability
from fedjax_sel.experiment.config import PARTS, _hparams
from fedjax_sel.metrics import results

# Fields in which the experiments of one batched program may differ besides the swept
# hyper-parameters (each experiment has its own output folder and random streams).
BATCH_FREE = ("seed", "availability_seed", "output_dir", "resume")


# Where numeric (float) values may differ within one program: they become traced
# per-experiment values (``fedjax_sel.core.batch``). Other hyper-parameters (the client
# update's, e.g. FedProx's mu, which the cohort trainer closes over; ints; strings) split
# the experiments into separate programs.
SWEEPABLE_PARTS = ("availability", "selection", "aggregator")


SWEEPABLE_FIELDS = ("client_lr",)


def _is_sweepable(path: tuple[str, ...], value) -> bool:
  if not isinstance(value, float):
    return False
  if len(path) == 1:
    return path[0] in SWEEPABLE_FIELDS
  return len(path) == 2 and path[0] in tuple(p + "_hparams" for p in SWEEPABLE_PARTS)


def _flat(c: ml_collections.ConfigDict) -> dict[tuple[str, ...], Any]:
  out = {}
  for k, v in c.items():
    if isinstance(v, ml_collections.ConfigDict):
      for kk, vv in v.items():
        out[(k, kk)] = vv
    else:
      out[(k,)] = v
  return out


def _signature(f, mask_floats: bool, depth: int = 0):
  """What a component's round function computes, as comparable data: its code and the
  values it closes over (nested functions recursively; floats masked when asked)."""
  code = getattr(f, "__code__", None)
  if code is None or depth > 8:
    return ["obj", id(f)]
  cells = []
  for cell in f.__closure__ or ():
    try:
      v = cell.cell_contents
    except ValueError:  # an empty cell
      v = None
    if callable(v):
      cells.append(_signature(v, mask_floats, depth + 1))
    elif isinstance(v, float):
      cells.append("<float>" if mask_floats else repr(v))
    elif v is None or isinstance(v, (bool, int, str)):
      cells.append(repr(v))
    else:
      cells.append(["obj", id(v)])
  return [code.co_filename, code.co_firstlineno, code.co_name, cells]


def availability_round(c: ml_collections.ConfigDict, mask_floats: bool = False):
  """The availability model's round functions (``probs``, ``sample``) as comparable data, or
  None when the config does not build. Models with equal values compute the same rounds
  from their states (e.g. IDL, LN, LDF, MDF at any beta: Bernoulli draws of the per-client
  rates fixed at init), so they share one program; only their init differs."""
  try:
    model = availability.make(c.availability, **_hparams(c, "availability"))
  except (ValueError, TypeError):
    return None
  return [_signature(model.probs, mask_floats), _signature(model.sample, mask_floats)]


def batch_key(c: ml_collections.ConfigDict) -> str:
  """Configs with equal keys can run as one batched program: they differ only in
  ``BATCH_FREE`` fields, sweepable float hyper-parameters, and availability models that
  differ only in their init or in float hyper-parameters (``availability_round``)."""
  flat = _flat(c)
  avail = availability_round(c, mask_floats=True)
  shape = {
    ".".join(p): ("<swept>" if _is_sweepable(p, v) else v)
    for p, v in flat.items()
    if p[0] not in BATCH_FREE
    and (avail is None or p[0] not in ("availability", "availability_hparams"))
  }
  shape["<availability round>"] = avail
  return results.dumps_line(shape)


def batch_groups(configs: list[ml_collections.ConfigDict]) -> list[list[int]]:
  """Indices of ``configs`` grouped into batchable sets (``batch_key``), in first-seen order."""
  groups: dict[str, list[int]] = {}
  for i, c in enumerate(configs):
    groups.setdefault(batch_key(c), []).append(i)
  return list(groups.values())


def _swept(configs) -> list[tuple[str, ...]]:
  flats = [_flat(c) for c in configs]
  paths = set().union(*flats)
  return sorted(
    p for p in paths if p[0] not in BATCH_FREE and len({repr(f.get(p)) for f in flats}) > 1
  )


def _make_parts_fn(c0: ml_collections.ConfigDict, swept: list[tuple[str, ...]]):
  """``hp -> Simulation.replace_parts kwargs``: c0's components with the swept values of hp
  (keyed "client_lr", "selection_hparams.alpha", ...)."""
  parts = sorted({p[0][: -len("_hparams")] for p in swept if len(p) == 2})

  def make_parts(hp: dict) -> dict:
    out = {}
    for part in parts:
      hparams = _hparams(c0, part)
      for p in swept:
        if len(p) == 2 and p[0] == part + "_hparams":
          hparams[p[1]] = hp[".".join(p)]
      if part == "selection":
        hparams["num_selected"] = c0.clients_per_round
      out[part] = PARTS[part].make(c0[part], **hparams)
    if ("client_lr",) in swept:
      out["client_lr"] = hp["client_lr"]
    return out

  return make_parts
