import pytest

from feedprof.record.buffer import DecimatingBuffer


def summed(a, b):
    return (b[0], a[1] + b[1])


def test_below_capacity_keeps_everything():
    buf = DecimatingBuffer(8, summed)
    for i in range(7):
        buf.append((i, 1))
    assert buf.items() == [(i, 1) for i in range(7)]
    assert buf.stride == 1


def test_full_buffer_halves_and_keeps_totals():
    buf = DecimatingBuffer(8, summed)
    for i in range(1000):
        buf.append((i, 1))
    items = buf.items()
    assert len(items) <= 8
    assert sum(n for _, n in items) == 1000  # nothing lost from the totals
    assert items[-1][0] == 999  # the newest item is always represented
    assert buf.stride >= 128


def test_records_cover_equal_spans_after_decimation():
    buf = DecimatingBuffer(4, summed)
    for i in range(16):
        buf.append((i, 1))
    spans = [n for _, n in buf.items()]
    assert len(set(spans)) == 1 and sum(spans) == 16


def test_memory_is_bounded_over_a_day_at_5hz():
    buf = DecimatingBuffer(4096, lambda a, b: a)
    for i in range(5 * 86400):
        buf.append(i)
    assert len(buf) <= 4096
    assert buf.items()[0] == 0  # a ring buffer would have forgotten the start


@pytest.mark.parametrize("cap", [0, 1, 3])
def test_rejects_bad_capacity(cap):
    with pytest.raises(ValueError):
        DecimatingBuffer(cap, summed)
