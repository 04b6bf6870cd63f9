"""The docs a user reads stay true: the generated reference is the code's, the README is a
landing page whose links resolve, and no page speaks the project's internal names."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support import REPO

DOCS = REPO / "docs"
USER_DOCS = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_generated_pages_are_what_the_code_generates() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "docs.py"), "check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_readme_is_a_landing_page_that_keeps_the_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 150
    assert "make run     # creates .venv" in text and "make test    # creates .venv" in text
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^run: ", makefile, re.M) and re.search(r"^test: ", makefile, re.M)
    for command in ("uv tool install .", "pipx install .", "make image", "make test-latest"):
        assert command in text
    assert "examples/first_look.phantom" in text
    assert (REPO / "examples" / "first_look.phantom").exists()


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_pages_links_resolve_and_it_names_no_seed(page) -> None:
    text = page.read_text()
    assert not re.search(r"\bseeds? ?0\d\d\b|\bthe seed's\b|\bseeds'", text, re.I), page
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        assert (page.parent / target).exists(), f"{page.name}: {target} does not exist"
