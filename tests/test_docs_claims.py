"""The claims table of docs/reproductions/README.md holds every verdict of the five pages.

Each page's "## Verdict per claim" table is the source; the claims table lists the same
claims, page by page in the page's order, with the same verdict words and qualifiers (seeds,
readings, processes). A page's verdict is its columns whose header says "verdict": a column
headed "verdict ..." holds the whole verdict; a column headed "<label>: verdict, ours" holds
"<verdict>: <numbers>", and its verdict is the text before the first ": ", written
"<label>: <verdict>" in the claims table, columns joined by "; ". Each page also opens with
an "In one minute" summary of at most eight lines, which the claims table links to.
"""

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "reproductions"
PAGES = {
  "FedGS": "fedgs.md",
  "FL-FDMS": "fl_fdms.md",
  "FedEMD": "fedemd.md",
  "Clustered Sampling": "clustered_sampling.md",
  "FedAR": "fedar.md",
}
SUMMARY = "## In one minute"
MAX_SUMMARY_LINES = 8


def split_row(line: str) -> list[str]:
  """Cells of a markdown table row; an escaped pipe (`\\|`) stays inside its cell."""
  cells = line.strip().strip("|").replace("\\|", "\0").split("|")
  return [c.replace("\0", "\\|").strip() for c in cells]


def table_after(text: str, heading: str) -> list[list[str]]:
  """Rows (header first, separator dropped) of the first table after a heading line."""
  lines = text.splitlines()
  try:
    at = next(i for i, line in enumerate(lines) if line.strip() == heading)
  except StopIteration:
    raise ValueError(f"no {heading!r} heading") from None
  start = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("|")), None)
  if start is None or any(lines[i].startswith("#") for i in range(at + 1, start)):
    raise ValueError(f"no table under {heading!r}")
  end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
  rows = [split_row(line) for line in lines[start:end]]
  return [rows[0]] + rows[2:]


def page_verdicts(text: str) -> list[tuple[str, str]]:
  """[(claim, verdict as the claims table writes it)] of a page's verdict table."""
  rows = table_after(text, "## Verdict per claim")
  header = rows[0]
  columns = [j for j, h in enumerate(header) if "verdict" in h.lower()]
  if not columns:
    raise ValueError(f"no verdict column in {header}")
  out = []
  for row in rows[1:]:
    parts = []
    for j in columns:
      cell = row[j].replace("**", "").strip()
      if ":" in header[j]:  # "<label>: verdict, ours"
        label = header[j].split(":")[0].strip()
        parts.append(f"{label}: {cell.split(': ')[0].strip()}")
      else:
        parts.append(cell)
    out.append((row[0], "; ".join(parts)))
  return out


def claims_verdicts(text: str) -> dict[str, list[tuple[str, str, str]]]:
  """{paper: [(number, claim, verdict)]} of the claims table, in its order."""
  rows = table_after(text, "## Claims")
  header = [h.lower() for h in rows[0]]
  num, claim, paper, verdict = (header.index(k) for k in ("#", "claim", "paper", "verdict"))
  out: dict[str, list] = {}
  for row in rows[1:]:
    out.setdefault(row[paper], []).append((row[num], row[claim], row[verdict]))
  return out


def summary_errors(name: str, text: str) -> list[str]:
  """The page opens with "In one minute" (right under its title, at most eight lines)."""
  lines = text.splitlines()
  if len(lines) < 3 or not lines[0].startswith("# ") or lines[2].strip() != SUMMARY:
    return [f"{name}: line 3 is not {SUMMARY!r}"]
  body = []
  for line in lines[3:]:
    if line.startswith("#"):
      break
    if line.strip():
      body.append(line)
  errors = []
  if not body:
    errors.append(f"{name}: the 'In one minute' section is empty")
  if len(body) > MAX_SUMMARY_LINES:
    errors.append(f"{name}: 'In one minute' has {len(body)} lines (at most {MAX_SUMMARY_LINES})")
  return errors


def check(pages: dict[str, str], claims_text: str) -> list[str]:
  """Every difference between the pages' verdicts and the claims table, one line each."""
  errors = []
  claims = claims_verdicts(claims_text)
  for paper in sorted(set(claims) - set(pages)):
    errors.append(f"claims table: paper {paper!r} has no page")
  for paper, text in pages.items():
    errors += summary_errors(paper, text)
    page = page_verdicts(text)
    listed = claims.get(paper, [])
    if len(page) != len(listed):
      errors.append(
        f"{paper}: the page has {len(page)} verdicts, the claims table {len(listed)} "
        f"(claims {', '.join(n for n, _, _ in listed)})"
      )
    for (claim, expected), (number, _, written) in zip(page, listed):
      if written != expected:
        errors.append(
          f"{paper}, claim {number} (page: {claim!r}): the claims table says "
          f"{written!r}, the page {expected!r}"
        )
  link_target = {f"{f}#in-one-minute" for f in PAGES.values()}
  for f in link_target:
    if f"({f})" not in claims_text:
      errors.append(f"claims table: no link to {f}")
  return errors


def read_pages() -> dict[str, str]:
  return {paper: (DOCS / f).read_text() for paper, f in PAGES.items()}


def test_claims_table_holds_every_page_verdict_in_the_same_words():
  errors = check(read_pages(), (DOCS / "README.md").read_text())
  assert not errors, "\n".join(errors)


MAX_CELL = 500  # characters: a verdict table is read row by row; longer evidence goes in the text


def test_verdict_table_cells_are_short():
  for paper, text in read_pages().items():
    rows = table_after(text, "## Verdict per claim")
    long = [(row[0][:50], len(cell)) for row in rows for cell in row if len(cell) > MAX_CELL]
    assert not long, f"{paper}: cells over {MAX_CELL} characters: {long}"


def test_every_claim_row_links_to_its_page_verdicts():
  claims = claims_verdicts((DOCS / "README.md").read_text())
  rows = table_after((DOCS / "README.md").read_text(), "## Claims")
  section = [h.lower() for h in rows[0]].index("section")
  for row in rows[1:]:
    paper = row[[h.lower() for h in rows[0]].index("paper")]
    assert f"({PAGES[paper]}#verdict-per-claim)" in row[section], row
  numbers = [int(n) for rows_ in claims.values() for n, _, _ in rows_]
  assert numbers == list(range(1, len(numbers) + 1)), "claims are numbered 1..n in order"


@pytest.mark.parametrize(
  "paper, old, new, expected",
  [
    # a seeds qualifier dropped on the page
    (
      "FedGS",
      "| reproduced (seed 0) | released protocol: counts 37-53",
      "| reproduced | released protocol: counts 37-53",
      "claim 14",
    ),
    # a verdict word changed
    (
      "Clustered Sampling",
      "| Fig. 1: MD picks 6 to 8 classes a round | reproduced |",
      "| Fig. 1: MD picks 6 to 8 classes a round | not reproduced |",
      "claims table says 'reproduced'",
    ),
    # a verdict inside a "<label>: verdict, ours" column
    (
      "FL-FDMS",
      "**not reproduced, reversed**: mean accuracy −0.36",
      "**not reproduced**: mean accuracy −0.36",
      "the page 'redrawn: not reproduced; Markov: not reproduced'",
    ),
  ],
)
def test_check_fails_on_a_planted_page_mismatch(paper, old, new, expected):
  pages = read_pages()
  assert pages[paper].count(old) == 1, f"the planted text is not on the {paper} page"
  pages[paper] = pages[paper].replace(old, new)
  errors = check(pages, (DOCS / "README.md").read_text())
  assert errors and any(expected in e for e in errors), errors


def test_check_fails_on_a_missing_claim_and_a_reworded_claims_cell():
  pages = read_pages()
  claims = (DOCS / "README.md").read_text()
  line = next(x for x in claims.splitlines() if "Mavericks fade" in x and x.startswith("|"))
  errors = check(pages, claims.replace(line + "\n", ""))
  assert any("FedEMD: the page has" in e for e in errors), errors
  line = next(x for x in claims.splitlines() if x.startswith("| 35 |"))
  reworded = line.replace("(seeds 0-2, both lr units)", "(every seed of both readings)")
  assert reworded != line
  errors = check(pages, claims.replace(line, reworded))
  assert any("claim 35" in e for e in errors), errors


def test_check_fails_on_a_long_or_missing_summary():
  pages = read_pages()
  long = pages["FedAR"].replace(SUMMARY + "\n", SUMMARY + "\n" + "- x\n" * 9, 1)
  assert any("FedAR: 'In one minute' has" in e for e in summary_errors("FedAR", long))
  gone = pages["FedAR"].replace(SUMMARY, "## Summary", 1)
  assert any("FedAR: line 3" in e for e in summary_errors("FedAR", gone))
  assert summary_errors("FedAR", pages["FedAR"]) == []
  # and check() reports it with the rest
  pages["FedAR"] = gone
  assert any("FedAR: line 3" in e for e in check(pages, (DOCS / "README.md").read_text()))


def test_verdict_parsing_of_both_column_kinds():
  text = (
    "# T\n\n## Verdict per claim\n\n"
    "| claim | redrawn: verdict, ours | Markov: verdict, ours | reason |\n|---|---|---|---|\n"
    "| c | **reproduced**: +1 | not measurable here | r |\n\n"
    "| claim | verdict | ours |\n|---|---|---|\n| ignored | x | y |\n"
  )
  assert page_verdicts(text) == [("c", "redrawn: reproduced; Markov: not measurable here")]
  text = (
    "## Verdict per claim\n\n| claim | verdict | ours |\n|---|---|---|\n"
    "| c | partly (seed 0): a | b |\n"
  )
  assert page_verdicts(text) == [("c", "partly (seed 0): a")]


def test_readme_opens_with_the_two_commands_then_links_each_summary():
  lines = (ROOT / "README.md").read_text().splitlines()
  assert lines[0] == "# fedjax_sel" and lines[2] == "```bash" and lines[5] == "```"
  assert lines[3].startswith("python3 -m venv .venv && .venv/bin/pip install -q -e . && ")
  assert lines[4].startswith("python3 -m venv .venv-test && ")
  text = "\n".join(lines)
  rows = table_after(text, "## Five papers reproduced: the answers")
  assert rows[0] == ["paper", "what reproduces", "what does not", "page"]
  assert len(rows) - 1 == len(PAGES)
  for row, page in zip(rows[1:], PAGES.values()):
    assert row[3].endswith(f"(docs/reproductions/{page}#in-one-minute)"), row
    assert row[1] and row[2], row
