"""W&B's own offline run files, read incrementally while they are written (real runs)."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from console.services.cadence.sources import OfflineRunSource
from console.services.cadence.tracker import CadenceTracker
from console.services.cadence.wandb_files import (
    BLOCK_LEN,
    OfflineRun,
    RecordLogReader,
    WandbFileError,
    iter_records,
    read_history,
    run_files,
)


def test_run_files_finds_offline_runs(finished_run: Path) -> None:
    wandb_dir = finished_run.parents[2]
    assert run_files(wandb_dir) == [finished_run]
    assert run_files(wandb_dir / "wandb") == [finished_run]
    assert run_files(wandb_dir / "nowhere") == []
    assert finished_run.parent.name.startswith("offline-run-")


def test_a_wandb_dir_named_wandb_is_searched_like_any_other(
    finished_run: Path, tmp_path: Path
) -> None:
    """The console's own default WANDB_DIR is <state>/phantom/wandb: W&B still writes into
    its wandb/ subdir, and the runs must be found there."""
    wandb_dir = tmp_path / "phantom" / "wandb"
    run_dir = wandb_dir / "wandb" / finished_run.parent.name
    shutil.copytree(finished_run.parent, run_dir)
    assert run_files(wandb_dir) == [run_dir / finished_run.name]


def test_reads_every_step_of_a_real_offline_run(finished_run: Path) -> None:
    assert finished_run.stat().st_size > 3 * BLOCK_LEN  # records span blocks
    kinds = [r.WhichOneof("record_type") for r in iter_records(finished_run)]
    assert kinds[0] == "header" and "run" in kinds and kinds[-1] in ("exit", "footer", "final")
    history = read_history(finished_run)
    assert [p.step for p in history] == list(range(24))
    assert all(b.timestamp > a.timestamp for a, b in itertools.pairwise(history))
    run = OfflineRun(finished_run)
    run.poll()
    assert (run.name, run.project, run.state, run.exit_code) == (
        "tiny-ppo",
        "cadence-test",
        "finished",
        0,
    )
    assert finished_run.name == f"run-{run.run_id}.wandb"


def test_incremental_reads_of_a_file_being_appended(finished_run: Path, tmp_path: Path) -> None:
    data = finished_run.read_bytes()
    all_records = list(RecordLogReader(finished_run).read_new())
    growing = tmp_path / "run-grow.wandb"
    growing.write_bytes(b"")
    reader = RecordLogReader(growing)
    seen: list[bytes] = []
    # Cut points: inside the file header, inside record headers, mid-record, at and around
    # block boundaries, then odd-sized chunks to the end.
    cuts = sorted({3, 7, 9, 50, 500, BLOCK_LEN - 3, BLOCK_LEN, BLOCK_LEN + 5, 2 * BLOCK_LEN + 1})
    cuts += [*list(range(cuts[-1] + 997, len(data), 997)), len(data)]
    written = 0
    for cut in cuts:
        with open(growing, "ab") as f:
            f.write(data[written:cut])
        written = cut
        new = reader.read_new()
        seen.extend(new)
        assert reader.offset <= written
    assert seen == all_records
    assert reader.read_new() == []
    assert reader.corrupt_skips == 0
    # Small read chunks (rows here are bigger than 1000 bytes) give the same records.
    assert RecordLogReader(finished_run).read_new(chunk_bytes=1000) == all_records


def test_corrupt_block_is_skipped_and_reading_goes_on(finished_run: Path, tmp_path: Path) -> None:
    data = bytearray(finished_run.read_bytes())
    data[200] ^= 0xFF  # inside the first block's early records
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(bytes(data))
    reader = RecordLogReader(bad)
    records = reader.read_new()
    assert reader.corrupt_skips == 1
    assert 0 < len(records) < len(list(RecordLogReader(finished_run).read_new()))
    steps = [p.step for p in read_history(bad)]
    assert steps and steps[-1] == 23  # later blocks still read


def test_not_a_wandb_file_names_the_path(tmp_path: Path) -> None:
    p = tmp_path / "run-x.wandb"
    p.write_bytes(b"PK\x03\x04 this is a zip file")
    with pytest.raises(WandbFileError, match=r"run-x\.wandb: not a W&B run file"):
        RecordLogReader(p).read_new()
    assert RecordLogReader(tmp_path / "missing.wandb").read_new() == []


def test_copy_of_a_finished_run_dir_is_found_again(finished_run: Path, tmp_path: Path) -> None:
    """A second run directory (as after a resume) shows up as another file, oldest first."""
    wandb_dir = tmp_path / "w"
    shutil.copytree(finished_run.parent, wandb_dir / "wandb" / finished_run.parent.name)
    later = "offline-run-29991231_235959-" + finished_run.parent.name.rsplit("-", 1)[-1]
    shutil.copytree(finished_run.parent, wandb_dir / "wandb" / later)
    files = run_files(wandb_dir)
    assert [f.parent.name for f in files] == [finished_run.parent.name, later]
    (cad,) = CadenceTracker([OfflineRunSource(wandb_dir)], stall_factor=3).poll()
    assert cad.state == "finished" and cad.last_step == 23
