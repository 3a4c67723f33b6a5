"""Frozen dataclasses to JSON and back: optionals, tuples, enums, tagged unions."""
import dataclasses
import enum
import json
from typing import ClassVar, Dict, Optional, Tuple

import pytest

from feedprof.store.codec import DecodeError, dumps, from_dict, to_dict, write_text_atomic


class Colour(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Shape:
    code: ClassVar[str] = "shape"
    _by_code: ClassVar[Dict[str, type]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Shape._by_code[cls.code] = cls

    @classmethod
    def tagged(cls, code):
        return cls._by_code.get(code, Shape)


@dataclasses.dataclass(frozen=True)
class Circle(Shape):
    code: ClassVar[str] = "circle"
    radius: float = 0.0


@dataclasses.dataclass(frozen=True)
class Square(Shape):
    code: ClassVar[str] = "square"
    side: int = 0


@dataclasses.dataclass(frozen=True)
class Drawing:
    name: str
    colour: Colour = Colour.RED
    shapes: Tuple[Shape, ...] = ()
    main: Optional[Shape] = None
    sizes: Tuple[Optional[float], ...] = ()
    meta: Dict[str, int] = dataclasses.field(default_factory=dict)


def test_round_trip_keeps_types_tags_and_enums():
    d = Drawing("d", Colour.BLUE, (Circle(1.5), Square(2)), Square(3), (1.0, None), {"a": 1})
    data = json.loads(dumps(d))
    assert data["colour"] == "blue"
    assert data["shapes"] == [{"code": "circle", "radius": 1.5}, {"code": "square", "side": 2}]
    back = from_dict(Drawing, data)
    assert back == d and back.colour is Colour.BLUE and isinstance(back.shapes[1], Square)


def test_non_finite_floats_are_stored_as_not_measured():
    assert to_dict(Drawing("x", sizes=(float("nan"), float("inf"), 2))) ["sizes"] == [None, None, 2]


def test_ints_are_accepted_where_floats_are_expected():
    assert from_dict(Circle, {"code": "circle", "radius": 2}).radius == 2.0


def test_newer_and_older_files():
    assert from_dict(Drawing, {"name": "x", "from_the_future": 1}) == Drawing("x")  # unknown keys ignored
    assert from_dict(Shape, {"code": "triangle"}) == Shape()  # an unknown member: the base's answer


@pytest.mark.parametrize("data,message", [
    ({"colour": "red"}, "lacks the required field 'name'"),
    ({"name": "x", "colour": "green"}, "'green' is not a Colour"),
    ({"name": "x", "main": [1]}, "expected an object"),
])
def test_bad_data_says_what_is_wrong(data, message):
    with pytest.raises(DecodeError, match=message):
        from_dict(Drawing, data)


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "f.json"
    write_text_atomic(str(path), "{}")
    write_text_atomic(str(path), '{"a": 1}')
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


@dataclasses.dataclass(frozen=True)
class Measured:
    """A record with figures derived from one of its fields (as store.Trial's from its run)."""

    name: str
    samples: Tuple[float, ...] = ()
    derived: ClassVar[Tuple[str, ...]] = ("n", "total")
    derived_from: ClassVar[str] = "samples"

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def total(self) -> float:
        return sum(self.samples)


def test_derived_figures_are_written_before_their_source_and_not_read_back():
    data = to_dict(Measured("m", (1.0, 2.5)))
    assert list(data) == ["name", "n", "total", "samples"] and data["n"] == 2 and data["total"] == 3.5
    data["total"] = 99.0  # a reader's edit of a derived figure changes nothing: it is derived again
    back = from_dict(Measured, data)
    assert back == Measured("m", (1.0, 2.5)) and back.total == 3.5
