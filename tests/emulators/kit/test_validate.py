"""The emulators' door (emulators/kit/validate.py): argparse types by type of value."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from emulators.kit import validate


@pytest.mark.parametrize("text", ["nan", "inf", "-1", "1e40", "soon"])
def test_seconds_are_finite_and_bounded(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        validate.finite(text, lo=0)


def test_seconds_accepted() -> None:
    assert validate.finite("2.5", above=0) == 2.5
    with pytest.raises(argparse.ArgumentTypeError, match="> 0"):
        validate.finite("0", above=0)


def test_run_dir_never_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert validate.run_dir(str(tmp_path / "new")) == tmp_path / "new"
    for bad in ("f", "f/x"):
        with pytest.raises(argparse.ArgumentTypeError, match="is a file"):
            validate.run_dir(str(tmp_path / bad))


def test_env_name_never_repeats_a_key() -> None:
    key = "0123456789abcdef0123456789abcdef01234567"
    assert validate.env_name("WANDB_API_KEY") == "WANDB_API_KEY"
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        validate.env_name(key)
    assert key not in str(refused.value)


def test_key_file(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nxyz\n")
    assert validate.key_file(str(key)) == key
    (tmp_path / "bin").write_bytes(bytes(range(256)))
    for bad in (tmp_path, tmp_path / "bin", tmp_path / "missing"):
        with pytest.raises(argparse.ArgumentTypeError):
            validate.key_file(str(bad))
