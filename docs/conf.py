"""Sphinx configuration of the remprop documentation site (``make docs``).

One site: the getting-started page, the markdown documents of ``docs/`` (read by
myst-parser) and the API reference of ``docs/api``. The API reference's own settings
(``docs/api/conf.py``: autodoc, numpydoc, the parameter-list and public-name checks,
``nitpicky``) are executed here unchanged, so the API pages are held to the same rules in
the site as in their own build; the site is built with warnings as errors too
(``-n -W --keep-going``; ``tests/test_docs_site.py``).
"""
from __future__ import annotations

from pathlib import Path

_API_CONF = Path(__file__).resolve().parent / "api" / "conf.py"
exec(compile(_API_CONF.read_text(encoding="utf-8"), str(_API_CONF), "exec"))  # noqa: S102 - our own file

_api_setup = setup  # noqa: F821 - defined by docs/api/conf.py

extensions = [*extensions, "myst_parser"]  # noqa: F821
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# api/_build: the API reference's own build; data/images: what the pages read, not pages
exclude_patterns = ["_build", "api/_build", "data", "images", "Thumbs.db", ".DS_Store"]

# --- myst-parser: the markdown documents as GitHub shows them ------------------------------
# $...$ and $$...$$ math; headings up to ### get anchors, so ``theory.md#3-...`` links resolve
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
myst_dmath_double_inline = True


def setup(app):
    _api_setup(app)
    # docs/architecture.md draws its diagram in a ```mermaid block (GitHub renders it): the
    # site shows its source as plain text rather than fail on an unknown lexer
    from pygments.lexers.special import TextLexer

    app.add_lexer("mermaid", TextLexer)
