"""The door's validators, one per type of input (console/config/validate.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from console.config.validate import (
    Invalid,
    accelerator_type,
    check_output,
    choice,
    directory,
    env_var_name,
    finite_number,
    looks_secret,
    read_text_file,
    safe_yaml,
    shown,
    write_atomic,
)

HEX_KEY = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", float("nan"), "x", True])
def test_finite_number_refuses_what_is_not_a_finite_number(value: object) -> None:
    with pytest.raises(Invalid, match="--grace"):
        finite_number("--grace", value, lo=0)


def test_finite_number_ranges() -> None:
    assert finite_number("n", "3", lo=1, hi=5, integer=True) == 3
    for value, kw in (("0", {"above": 0}), ("6", {"hi": 5}), ("1.5", {"integer": True})):
        with pytest.raises(Invalid, match=r"^n "):
            finite_number("n", value, **kw)  # type: ignore[arg-type]


def test_choice_names_the_nearest() -> None:
    with pytest.raises(Invalid, match="did you mean preempted"):
        choice("KIND", "preemted", ["preempted", "recovered"])


def test_secrets_are_never_repeated() -> None:
    assert looks_secret(HEX_KEY) and looks_secret("hf_" + "a1" * 17)
    assert not looks_secret("WANDB_API_KEY") and not looks_secret("v5p-64")
    assert HEX_KEY not in shown(HEX_KEY)
    with pytest.raises(Invalid) as refused:
        env_var_name("wandb.api_key_env", HEX_KEY)
    assert HEX_KEY not in str(refused.value) and "wandb.api_key_env" in str(refused.value)
    assert env_var_name("x", "MY_KEY") == "MY_KEY"


def test_accelerator_types_from_the_table() -> None:
    assert accelerator_type("t", "v5p-64") == "v5p-64"
    with pytest.raises(Invalid, match="sizes"):
        accelerator_type("t", "v4-33")
    with pytest.raises(Invalid, match="not a known TPU type"):
        accelerator_type("t", "v9z-8")
    with pytest.raises(Invalid, match="not a known TPU type"):
        accelerator_type("t", "v4-32", table=["v5p-64"])


def test_directory_must_be_one_or_creatable(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert directory("d", tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    for bad in (tmp_path / "f", tmp_path / "f" / "x" / "y"):
        with pytest.raises(Invalid, match="file"):
            directory("--run-dir", bad)


def test_yaml_aliases_are_refused_before_they_expand() -> None:
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    started = time.monotonic()
    with pytest.raises(Invalid, match="aliases") as refused:
        safe_yaml(bomb, "--spec b.yaml")
    assert len(str(refused.value)) < 300
    print(f"alias bomb refused in {time.monotonic() - started:.4f}s")
    assert safe_yaml("image: x\nslices: 2\n", "s") == {"image": "x", "slices": 2}
    with pytest.raises(Invalid, match="bytes"):
        safe_yaml("a: b\n" * 100_000, "s")


def test_read_text_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(bytes(range(256)))
    with pytest.raises(Invalid, match=r"bin\.yaml.*binary"):
        read_text_file("--spec", tmp_path / "bin.yaml")
    with pytest.raises(Invalid, match="cannot read"):
        read_text_file("--spec", tmp_path / "missing.yaml")


def test_check_output_follows_symlinks_and_keeps_what_is_kept(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    journal.write_bytes(b"SQLite format 3\x00")
    run_dir = tmp_path / "pod"
    run_dir.mkdir()
    (tmp_path / "alias").symlink_to(journal)
    keep = [("journal", journal), ("pod emulator's run dir", run_dir)]
    for target in (journal, tmp_path / "alias", run_dir / "r.md"):
        with pytest.raises(Invalid, match=r"journal|run dir"):
            check_output("-o", target, keep=keep, may_replace=lambda _: True, replaced_what="x")
    (tmp_path / "mine.md").write_text("old")
    with pytest.raises(Invalid, match="is not a report"):
        check_output("-o", tmp_path / "mine.md", keep=keep, may_replace=lambda _: False,
                     replaced_what="a report")  # fmt: skip
    out = check_output("-o", tmp_path / "new.md", keep=keep, may_replace=lambda _: False,
                       replaced_what="a report")  # fmt: skip
    write_atomic(out, "text")
    assert out.read_text() == "text" and journal.read_bytes() == b"SQLite format 3\x00"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "alias", "journal.sqlite", "mine.md", "new.md", "pod",
    ]  # fmt: skip
