"""User documents speak to users: no tracker numbers and no words of the working history.

README.md, every Markdown file under docs/ and results/README.md are read by people who
never saw the project's tracker or how the work was scheduled. A tracker number ("issue
41", "#41", "acceptance item 1") or a phrase of the working history ("this session", "the
lead's test runs", "the sandbox of <date>", "as they finish", "is being rerun") means
nothing to them, so each is rewritten as what it says about the code or the results.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (pattern, what it is); case-insensitive
FORBIDDEN = [
  (r"\bissues?[ -]\d+", "a tracker number"),
  (r"(?<![\w/&#\]`])#\d+\b", "a tracker number"),
  (r"\bissue's\b", "a tracker reference"),
  (r"\bacceptance (?:item|bar|criteri|run)", "a tracker's acceptance item"),
  (r"\bthis session\b", "working history"),
  (r"\bseveral sessions\b", "working history"),
  (r"\b(?:next|later|another|a future) session\b", "working history"),
  (r"\bthe lead's\b", "working history"),
  (r"\bthe lead (?:engineer|ran|runs|measured|said)\b", "working history"),
  (r"\bsandbox\b", "working history (name the machine instead)"),
  (r"\bas they finish\b", "a stale line"),
  (r"\bbeing rerun\b", "a stale line"),
  (r"\bis being run\b", "a stale line"),
  (r"\bqueued\b", "a stale line"),
  (r"\bstill running\b", "a stale line"),
  (r"\bthis one\)", "working history (which machine?)"),
  (r"\btoday's\b(?! lr)", "working history (which day?)"),
]


def user_documents() -> list[pathlib.Path]:
  docs = sorted((ROOT / "docs").rglob("*.md"))
  return [ROOT / "README.md", *docs, ROOT / "results" / "README.md"]


def find_history_words(text: str, name: str = "") -> list[str]:
  """'<name>:<line>: <what> <match>' for every forbidden word in the text."""
  hits = []
  for number, line in enumerate(text.splitlines(), 1):
    for pattern, what in FORBIDDEN:
      for m in re.finditer(pattern, line, re.IGNORECASE):
        hits.append(f"{name}:{number}: {what}: {m.group(0)!r} in {line.strip()[:120]!r}")
  return hits


def test_user_documents_have_no_tracker_numbers_or_history_words():
  hits = []
  for path in user_documents():
    hits += find_history_words(path.read_text(), str(path.relative_to(ROOT)))
  assert not hits, "\n".join(hits)


def test_the_documents_checked_include_the_pages_and_indexes():
  names = {str(p.relative_to(ROOT)) for p in user_documents()}
  assert {
    "README.md",
    "results/README.md",
    "docs/reproductions/fedemd.md",
    "docs/reproductions/fedemd_appendix.md",
  } <= names


@pytest.mark.parametrize(
  "planted",
  [
    "FedEMD's R@99 is being rerun under the text's reading.",
    "Open: issue 37, acceptance item 1.",
    "See #41 for the plan.",
    "recorded in the same issue-7 work",
    "while the lead's test runs share the 2 cores",
    "made on 2026-11-28's sandbox (AMD EPYC)",
    "the tables of `_round_lr` and `_fig4` as they finish",
    "The issue's own script gave 20.9.",
    "measured in this session",
    "seed 0 queued (`run_chain.sh` step 6b)",
  ],
)
def test_a_planted_history_line_is_found(planted):
  # planted at the end of a copy of the README (the file itself is not touched)
  text = (ROOT / "README.md").read_text() + "\n" + planted + "\n"
  hits = find_history_words(text, "README.md")
  assert any(f":{len(text.splitlines())}:" in h for h in hits), hits


@pytest.mark.parametrize(
  "fine",
  [
    "discovering friends costs FL-FDMS the lead",
    "rescaled to today's lr",
    "[verdict](fedemd.md#verdict-per-claim) and `--acceptance_only`",
    "a stale entry; the results of seeds 1-2",
  ],
)
def test_ordinary_words_are_not_flagged(fine):
  assert find_history_words(fine) == []


DEBIAN_FMNIST = "/usr/share/datasets/fashion-mnist"


def machine_paths(text: str, name: str, described: int = 0) -> list[str]:
  """Fashion-MNIST's folder is set once (`FMNIST=...`) and commands use `$FMNIST`.

  `described` lines may name the folder in prose (the README says where Debian puts it).
  """
  lines = [line for line in text.splitlines() if DEBIAN_FMNIST in line]
  settings = [line for line in lines if line.startswith("FMNIST=")]
  others = [line for line in lines if not line.startswith("FMNIST=")]
  errors = []
  if len(settings) > 1:
    errors.append(f"{name}: FMNIST is set {len(settings)} times")
  if len(others) > described:
    errors += [f"{name}: the folder written out: {line.strip()[:100]!r}" for line in others]
  return errors


def test_commands_take_fashion_mnist_from_one_variable():
  errors = machine_paths((ROOT / "README.md").read_text(), "README.md", described=1)
  for page in sorted((ROOT / "docs" / "reproductions").glob("*.md")):
    errors += machine_paths(page.read_text(), page.name)
  assert not errors, "\n".join(errors)


def test_a_written_out_folder_is_found():
  page = (ROOT / "docs" / "reproductions" / "fedar.md").read_text()
  assert machine_paths(page, "fedar.md") == []
  planted = page.replace('--data_dir="$FMNIST"', f"--data_dir={DEBIAN_FMNIST}", 1)
  assert planted != page
  assert any("written out" in e for e in machine_paths(planted, "fedar.md"))
