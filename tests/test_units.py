"""Numbers worded for people: the units every layer shares."""
import pytest

from feedprof.units import fmt_bytes, fmt_seconds, parse_bytes


@pytest.mark.parametrize("seconds, words", [
    (None, "n/a"), (0.25, "250 ms"), (12.34, "12.3 s"), (99.9, "99.9 s"),
    (245.0, "4 min 05 s"), (3599.4, "59 min 59 s"), (7870.0, "2 h 11 min"), (90000.0, "25 h 00 min")])
def test_long_durations_are_read_in_minutes_and_hours(seconds, words):
    assert fmt_seconds(seconds) == words


def test_sizes_round_trip():
    assert parse_bytes("8G") == 8 << 30 and parse_bytes("1.5GiB") == 3 << 29 and parse_bytes("1000") == 1000
    assert fmt_bytes(3 << 29) == "1.5 GiB" and fmt_bytes(512) == "512 B"
    with pytest.raises(ValueError, match="expected a size"):
        parse_bytes("lots")
