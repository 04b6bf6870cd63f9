"""The place record: where a pod is, in the journal's file, shared by every process."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.services.record.journal import Journal
from console.services.record.place import Place, PlaceRecord, pod_key


def test_a_move_outlives_the_process_and_keeps_the_other_fields(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    key = pod_key("gcp", "proj", "phantom-pod")
    with Journal(path) as j:
        rec = PlaceRecord(j, key, clock=lambda: 10.0)
        assert rec.load() is None
        rec.save(zone="local-a")
        rec.save(head_host="phantom-pod-w0", head_address="10.0.0.2:6379")
        rec.save(zone="local-c", queued_resource="phantom-pod-qr")
    with Journal(path) as j:  # a restarted console, a script, `phantom status`
        assert PlaceRecord(j, key).load() == Place(
            key, "local-c", "phantom-pod-qr", "phantom-pod-w0", "10.0.0.2:6379", 10.0
        )
        assert PlaceRecord(j, pod_key("gcp", "proj", "other")).load() is None


def test_an_unchanged_save_writes_nothing_and_a_bad_field_is_refused(tmp_path: Path) -> None:
    times = iter([1.0, 2.0, 3.0])
    with Journal(tmp_path / "j.sqlite") as j:
        rec = PlaceRecord(j, "k", clock=lambda: next(times))
        assert rec.save(zone="z1") is not None
        rec.save(zone="z1")
        assert rec.load() == Place("k", "z1", updated_at=1.0)
        with pytest.raises(ValueError, match="no field"):
            rec.save(region="x")
