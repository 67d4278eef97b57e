"""The documentation site (``make docs``) and the references of docs/theory.md.

The site is one Sphinx project (``docs/conf.py``, ``docs/index.md``): the getting-started
page, every markdown document of ``docs/`` (myst-parser) and the API reference
(``docs/api``, whose settings it executes, nitpicky included). It builds with warnings as
errors, like the API reference alone (``tests/test_api_docs.py``); and every markdown
document is in its table of contents.

docs/theory.md ends with a References section that lists every work its text cites.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from test_api_docs import sphinx_build

DOCS = Path(__file__).resolve().parents[1] / "docs"


# -- the site -----------------------------------------------------------------------------
def _toctree_entries(index: str) -> set[str]:
    entries = set()
    for block in re.findall(r"```\{toctree\}\n(.*?)```", index, flags=re.S):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith(":"):
                entries.add(re.sub(r"^.*<(.+)>$", r"\1", line))
    return entries


def test_every_markdown_document_is_in_the_site():
    entries = _toctree_entries((DOCS / "index.md").read_text(encoding="utf-8"))
    pages = {path.stem for path in DOCS.glob("*.md") if path.name != "index.md"}
    assert "getting_started" in pages and len(pages) >= 9  # the folder was read
    assert sorted(pages - entries) == []
    assert "api/index" in entries
    assert sorted(e for e in entries if not (DOCS / f"{e}.md").exists() and not (DOCS / f"{e}.rst").exists()) == []


@pytest.mark.slow
def test_the_site_builds_without_warnings(tmp_path):
    """``make docs``: the whole site, the API reference included, nitpicky with warnings as
    errors (the one build of the API reference in the suite: ``tests/test_api_docs.py``)."""
    pytest.importorskip("myst_parser", reason="the docs extra builds the site")
    pytest.importorskip("numpydoc", reason="the docs extra builds the site")
    pytest.importorskip("torch", reason="the validation pages of the API reference import torch")
    result = sphinx_build(DOCS, tmp_path)
    assert result.returncode == 0, result.stderr[-6000:]
    html = tmp_path / "html"
    pages = ["index", "getting_started", "theory", "training", "api/index",
             *(f"api/{page.stem}" for page in (DOCS / "api").glob("*.rst"))]
    assert sorted(page for page in pages if not (html / f"{page}.html").exists()) == []
    # the markdown's math and cross-document links were rendered, not left as text
    theory = (html / "theory.html").read_text(encoding="utf-8")
    assert 'class="math' in theory and "$$" not in theory
    assert 'href="derivations.html"' in theory
    assert 'href="api/index.html"' in (html / "getting_started.html").read_text(encoding="utf-8")
    # the API pages kept their cross-references (autodoc ran, the public-name aliases resolve)
    assert 'href="theory.html#remprop.theory.' in (html / "api" / "diagrams.html").read_text(encoding="utf-8")


# -- the getting-started page runs as written ----------------------------------------------
def _commands(page: str) -> list[list[str]]:
    """The ``remprop ...`` lines of a page's bash blocks, comments dropped, as argv lists."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", page, flags=re.S):
        lines += [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("remprop ")]
    return [argv[1:] for argv in lines]


def test_getting_started_commands_parse():
    """Each command of the page parses with the ``remprop`` parser as written (an option
    renamed or removed fails here); the commands themselves are the CLI tests' business."""
    from remprop.cli.parser import build_parser

    commands = _commands((DOCS / "getting_started.md").read_text(encoding="utf-8"))
    assert [argv[0] for argv in commands] == ["min-alpha", "diagram", "check", "check", "validate"]
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)  # exits (SystemExit) on an unknown option or a bad value


def test_getting_started_python_runs_as_written(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "getting_started.md").read_text(encoding="utf-8"),
                        flags=re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[0], "getting_started.md", "exec"), namespace)
    # 12 post-LN blocks at alpha_SA = 1 and beta = 0.5 stay below the collapse threshold
    assert namespace["traj"].rho.shape == (13,) and namespace["traj"].rho[-1] < 0.99
    assert (tmp_path / "first12.npz").exists() and (tmp_path / "first12.json").exists()


# -- the references of docs/theory.md ------------------------------------------------------
#: Capitalised words that precede a year without being an author (venues, names of models).
_NOT_AUTHORS = {"NeurIPS", "Findings", "Python", "Gemma", "Llama", "Phi", "Team", "GPT"}
_SURNAME = r"[A-Z][a-zA-Z'\u00c0-\u017f-]*[a-z\u00c0-\u017f][a-zA-Z'\u00c0-\u017f-]*"
_AUTHOR_YEAR = re.compile(rf"\b({_SURNAME})(?: (?:&|and) {_SURNAME}| et al\.)?,? \(?((?:18|19|20)\d\d)\)?")
_ARXIV = re.compile(r"arXiv[: ]*(\d{4}\.\d{4,5})")
_SECTION_REFERENCES = re.compile(r"(?:\*References:\*|References for this section:)(.*?)(?:\n\n|\Z)", re.S)


def split_references(text: str) -> tuple[str, str]:
    """(the text before the final ``## References`` section, that section)."""
    heading = text.rfind("\n## References\n")
    if heading < 0:
        return text, ""
    return text[:heading], text[heading:]


def _entries(section: str) -> list[str]:
    return [" ".join(item.split()) for item in re.split(r"\n\* ", section)[1:]]


def missing_references(text: str) -> list[str]:
    """The citations of ``text`` that its final References section does not list.

    A citation is an author and a year ("Derrida 1981", "Cho & Saul 2009", "Noci et al.
    (2022)"), an arXiv number, or an item of a section's own reference list ("*References:*
    A. Author, ..."); it is listed when an entry names that author (and that year), or that
    arXiv number.
    """
    body, section = split_references(text)
    entries = _entries(section)
    listed = " ".join(entries)
    missing = []
    for surname, year in _AUTHOR_YEAR.findall(body):
        if surname not in _NOT_AUTHORS and not any(surname in e and year in e for e in entries):
            missing.append(f"{surname} {year}")
    missing += [f"arXiv {number}" for number in _ARXIV.findall(body) if number not in listed]
    for paragraph in _SECTION_REFERENCES.findall(body):
        for item in paragraph.split(";"):
            words = [w for w in re.sub(r"\b(?:[A-Z]\.-?)+\s*", " ", item).split() if w not in ("and", "&")]
            author = words[0].rstrip(",") if words else ""
            if author and author not in listed:
                missing.append(author)
    return sorted(set(missing))


def test_theory_ends_with_its_references():
    text = (DOCS / "theory.md").read_text(encoding="utf-8")
    body, section = split_references(text)
    assert section and not re.search(r"^## ", section[len("\n## References\n"):], flags=re.M)  # the last section
    assert len(_entries(section)) >= 20
    assert "arXiv 2505.24333" in section  # the paper


def test_every_citation_of_theory_is_in_its_references():
    text = (DOCS / "theory.md").read_text(encoding="utf-8")
    body, _ = split_references(text)
    # the scan finds the citations there are (so an empty answer means something)
    assert len(_AUTHOR_YEAR.findall(body)) >= 15 and len(_ARXIV.findall(body)) >= 8
    assert missing_references(text) == []


def test_a_missing_reference_is_found():
    text = ("As Derrida 1981 and Foo et al. (2020) show, and Bar & Baz 1999; see arXiv 1234.56789.\n\n"
            "*References:* Q. Quux, J. Phys. 1, 2 (2001).\n\n"
            "## References\n\n* B. Derrida, \"Random-energy model\", Phys. Rev. B 24, 2613 (1981).\n")
    assert missing_references(text) == ["Bar 1999", "Foo 2020", "Quux", "arXiv 1234.56789"]
