"""Every committed file or folder the user documents name under results/ exists.

README.md, docs/**/*.md and results/README.md point at committed results (`results/<folder>/
<file>`, Markdown links `../../results/...`, brace and glob patterns such as
`results/fedar_fmnist{,_x}/accuracy.md`); a renamed or
moved folder must take its references with it. The study binaries' own output folders
under `runs/` are not checked (they exist only after a run).
"""

import glob
import itertools
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# a path under results/, written plainly, in a link, or with braces and globs
# words before a path, on its line, that say a command creates it
CREATED = ("mkdir", "copied into", "--seed_from=", "--collect=")
PATH = re.compile(r"(?<![\w./-])(?:\.\./)*results/[\w.*{},/\-]*")


def user_documents() -> list[pathlib.Path]:
  docs = sorted((ROOT / "docs").rglob("*.md"))
  return [ROOT / "README.md", *docs, ROOT / "results" / "README.md"]


def expand_braces(pattern: str) -> list[str]:
  """`a{,_b}/c{x,y}` -> [a/cx, a/cy, a_b/cx, a_b/cy] (no nesting)."""
  parts = re.split(r"(\{[^{}]*\})", pattern)
  options = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
  return ["".join(choice) for choice in itertools.product(*options)]


def missing_paths(text: str, base: pathlib.Path) -> list[str]:
  """The results/ paths of a document that match no committed file or folder."""
  missing = []
  for match in PATH.finditer(text):
    line_start = text.rfind("\n", 0, match.start()) + 1
    if any(w in text[line_start : match.start()] for w in CREATED):
      continue  # a folder that a command creates or fills as runs finish
    raw = match.group(0).rstrip(".,")
    relative = raw.lstrip("./")  # "../../results/x" and "results/x" name the same file
    while relative.startswith("../"):
      relative = relative[3:]
    if relative in ("results", "results/"):
      continue
    for path in expand_braces(relative):
      if not glob.glob(str(ROOT / path)):
        missing.append(f"{base}: {raw}")
        break
  return missing


def test_results_paths_named_in_the_documents_exist():
  missing = []
  for doc in user_documents():
    missing += missing_paths(doc.read_text(), doc.relative_to(ROOT))
  assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
  "text, found",
  [
    ("see `results/fedar_fmnist/accuracy.md`", []),
    ("see `results/fedar_fmnist/accuracy.mdx`", ["x: results/fedar_fmnist/accuracy.mdx"]),
    ("[fig](../../results/fedar_fmnist/fig2_pmin0.1.png).", []),
    (
      "`results/fedemd_fmnist/text_reading_lr_per_{participation,round_default}/table1/"
      "cells/1_excl_{random,fedemd}/seed*/`",
      [],
    ),
    (
      "`results/fedar_fmnist{,_nope}/accuracy.md`",
      ["x: results/fedar_fmnist{,_nope}/accuracy.md"],
    ),
    ("written to runs/fedar_fmnist and copied to results/", []),
    ("mkdir -p results/fedgs_fmnist/new_protocol && cp ...", []),
    ("each finished run is copied into `results/fedgs_table2/new/` as it lands", []),
    ("each finished run goes to `results/fedgs_table2/new/`", ["x: results/fedgs_table2/new/"]),
    ("python -m experiments.fedemd --collect=results/fedemd_fmnist/new_study", []),
  ],
)
def test_missing_paths_finds_exactly_the_missing_ones(text, found):
  assert missing_paths(text, pathlib.Path("x")) == found


LINK = re.compile(r"\]\(([^)\s]*?\.md)?#([^)\s]+)\)")


def slug(heading: str) -> str:
  """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
  """A document's headings' anchors and its explicit ones (`<a id="claim-32"></a>`, the rows
  of a generated verdict table)."""
  text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # no headings in code
  headings = {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}
  return headings | set(re.findall(r'<a id="([^"]+)"></a>', text))


def broken_anchors(doc: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
  broken = []
  for match in LINK.finditer(doc.read_text()):
    target = (doc.parent / match.group(1)).resolve() if match.group(1) else doc
    if not target.is_file():
      broken.append(f"{doc.relative_to(root)}: no file {match.group(1)}")
    elif match.group(2) not in anchors(target):
      broken.append(f"{doc.relative_to(root)}: no heading #{match.group(2)} in {target.name}")
  return broken


def test_section_links_in_the_documents_lead_to_headings():
  broken = [b for doc in user_documents() for b in broken_anchors(doc)]
  assert not broken, "\n".join(broken)


def test_slug_is_githubs():
  assert slug("Verdict per claim") == "verdict-per-claim"
  assert slug("Fig. 4 as the text describes, seed 0") == "fig-4-as-the-text-describes-seed-0"
  assert slug(
    "Table 1 as the text describes: D_c from label distributions, size-weighted FedAvg"
  ) == ("table-1-as-the-text-describes-d_c-from-label-distributions-size-weighted-fedavg")


def test_a_broken_anchor_is_found(tmp_path):
  doc = tmp_path / "a.md"
  (tmp_path / "b.md").write_text('# B\n\n## In one minute\n\n| <a id="claim-7"></a>7 |\n')
  doc.write_text("[ok](b.md#in-one-minute) [row](b.md#claim-7) [bad](b.md#in-two-minutes)\n")
  assert broken_anchors(doc, tmp_path) == ["a.md: no heading #in-two-minutes in b.md"]
