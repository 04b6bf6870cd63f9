"""The log cursor: a resumed follow replays lines the reader has seen; it drops exactly
those, also when several lines share one timestamp, and compares kubelet timestamps as
times (a trimmed fraction is not a shorter string)."""

from __future__ import annotations

from console.services.backends.gke.logs import RESUME_MARGIN_S, LogCursor, parse_ts


def read(cursor: LogCursor, stamps: list[int]) -> list[int]:
    """One request: the positions of the lines the cursor lets through."""
    cursor.rewind()
    return [i for i, ts in enumerate(stamps) if cursor.accept(ts)]


def test_a_resume_drops_what_was_seen_and_keeps_what_is_new() -> None:
    c = LogCursor()
    assert read(c, [1, 2, 3]) == [0, 1, 2]
    assert read(c, [2, 3, 4, 5]) == [2, 3]  # the server reached back: 2 and 3 were seen


def test_lines_sharing_a_timestamp_count_one_by_one() -> None:
    c = LogCursor()
    assert read(c, [1, 5, 5]) == [0, 1, 2]  # a burst of two lines at t=5, both new
    # The resumed request sends both t=5 lines again, then a third one at t=5: only it is new.
    assert read(c, [1, 5, 5, 5, 6]) == [3, 4]
    assert read(c, [5, 5, 5, 6, 6]) == [4]


def test_kubelet_timestamps_compare_as_times() -> None:
    trimmed = parse_ts("2025-01-01T00:00:00.5Z")
    full = parse_ts("2025-01-01T00:00:00.500000000Z")
    later = parse_ts("2025-01-01T00:00:00.123456789Z")
    assert trimmed == full and later is not None and trimmed is not None
    assert later < trimmed  # as text "…00.1…" < "…00.5Z" holds, but "…00.5Z" vs "…00.50…" not
    assert parse_ts("not a time") is None and parse_ts("") is None


def test_since_seconds_reaches_back_past_the_last_line() -> None:
    c = LogCursor()
    assert c.since_seconds(1000.0) is None  # nothing read: from the start
    c.accept(int(990.2 * 1e9))
    assert c.since_seconds(1000.0) == 10 + RESUME_MARGIN_S
