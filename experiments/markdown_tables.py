"""Rows of the Markdown tables in committed results files (stdlib only, so that
docs/reproductions/recompute.py can read them without importing jax)."""


def markdown_rows(lines) -> list[dict]:
  """Rows of every Markdown table in ``lines``, each keyed by its own table's header."""
  rows, header = [], None
  for line in lines:
    if not line.startswith("|"):
      header = None
      continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if header is None:
      header = cells
    elif not set("".join(cells)) <= set("-: "):
      rows.append(dict(zip(header, cells)))
  return rows
