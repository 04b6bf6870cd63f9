"""`phantom --version` says the installed version, and CHANGELOG.md has a section for it."""

from __future__ import annotations

import re
import tomllib

import pytest

from console.cli import main
from tests.support import REPO

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"phantom {VERSION}\n"


def test_the_changelog_names_this_version_and_keeps_an_unreleased_section() -> None:
    headings = re.findall(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased" and VERSION in headings
