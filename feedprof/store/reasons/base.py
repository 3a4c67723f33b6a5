"""The base of every finding, and the one for codes this feedprof does not know (see __init__.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterable, List


@dataclass(frozen=True)
class Reason:
    """Base of every finding; ``code`` names it in JSON."""

    code: ClassVar[str] = "reason"
    _by_code: ClassVar[Dict[str, type]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Reason._by_code[cls.code] = cls

    @classmethod
    def kinds(cls) -> List[type]:
        """Every finding class under this one, by name (the JSON Schema's tagged union)."""
        return sorted({m for m in Reason._by_code.values() if issubclass(m, cls)}, key=lambda m: m.__name__)

    @classmethod
    def tagged(cls, code: Any) -> type:
        """The subclass a JSON object names (codec.py decodes tagged unions with it)."""
        return cls._by_code.get(code, Unknown)


def said_once(reasons: Iterable["Reason"]) -> List["Reason"]:
    """In order, each finding once (by equality: findings with configs do not hash)."""
    out: List[Reason] = []
    for reason in reasons:
        if reason not in out:
            out.append(reason)
    return out


@dataclass(frozen=True)
class Unknown(Reason):
    """A finding written by a newer feedprof: kept, not understood."""

    code: ClassVar[str] = "unknown"


Config = Dict[str, Any]
