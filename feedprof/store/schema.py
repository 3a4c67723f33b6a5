"""JSON Schemas (draft 2020-12) of ``run.json`` and ``results.json``, from the records' type hints.

Until the first release there is one version of each record; from the first
release on, a change bumps the version (a new file beside the old) and the old
version is still read.

NOTE [ One schema file per record version ]

    store/ dataclasses ─► generate(tag) ─► feedprof/schemas/run-1.json, tune-1.json (shipped)
    a JSON file's "schema": "feedprof.run/1" ─► validate(data) picks run-1.json

A schema file describes exactly what its version writes. The test suite
checks that the shipped files equal what the records generate now, so a
change to a record (``SCHEMA_RUN`` in store/run.py, ``SCHEMA_TUNE`` in
store/tune.py) must regenerate them: ``python -m feedprof.store.schema
--write``. feedprof reads the version it writes and no other (store/files.py
refuses any other tag with one line); after a release, a changed record gets a
new tag and file, and store/files.py gains the reader of the old one.

``python -m feedprof.store.schema FILE.json ...`` validates files (exit 1 if
one does not fit); in Python, :func:`validate` does the same for parsed data.

The rules are :mod:`feedprof.store.codec`'s: ``Optional[X]`` allows null,
``Tuple[X, ...]`` is an array, ``Dict[str, X]`` an object, a nested dataclass
a ``$defs`` entry. Every field is required (the codec always writes every
field), unknown fields are refused, and a field named ``schema`` is pinned to
its default: the version tag. Validation needs ``jsonschema`` (imported only
by :func:`validate`); generating needs nothing.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import sys
import types
import typing
from typing import Any, Dict, List, Optional, Sequence

from feedprof.store.codec import json_names

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schemas")  # feedprof/schemas
INSTALL_HINT = ("validating feedprof JSON needs jsonschema: pip install jsonschema "
                "(from feedprof's clone: pip install -e '.[schema]')")
REGENERATE = "python -m feedprof.store.schema --write"
TAG = "code"  # codec.TAG: the key naming a tagged union's member


class UnknownSchema(ValueError):
    """Data whose ``schema`` field names no schema this feedprof ships."""


def roots() -> Dict[str, type]:
    """The version tag of each kind of file, and the dataclass it holds."""
    from feedprof.store import SCHEMA_RUN, SCHEMA_TUNE, Run, TuneResult

    return {SCHEMA_RUN: Run, SCHEMA_TUNE: TuneResult}


def file_name(tag: str) -> str:
    """``feedprof.run/1`` -> ``run-1.json``."""
    kind, _, version = tag.partition("/")
    if not kind.startswith("feedprof.") or not version.isdigit():
        raise UnknownSchema(f"{tag!r} is not a feedprof schema tag (like 'feedprof.run/1')")
    return f"{kind[len('feedprof.'):]}-{version}.json"


# --------------------------------------------------------------- generating


def generate(tag: str, root: type) -> Dict[str, Any]:
    """The JSON Schema of files tagged ``tag`` whose top level is the dataclass ``root``."""
    defs: Dict[str, Any] = {}
    _define(root, defs)
    return {"$schema": DRAFT, "title": tag,
            "description": f"A feedprof file with \"schema\": \"{tag}\" (generated from the records in feedprof/store/ "
                           f"by {REGENERATE}).",
            "$ref": f"#/$defs/{root.__name__}", "$defs": dict(sorted(defs.items()))}


def _define(cls: type, defs: Dict[str, Any]) -> Dict[str, Any]:
    ref = {"$ref": f"#/$defs/{cls.__name__}"}
    if cls.__name__ in defs:
        return ref
    defs[cls.__name__] = {}  # placeholder: a record may (indirectly) hold its own kind
    hints = typing.get_type_hints(cls)
    props: Dict[str, Any] = {}
    tag = getattr(cls, TAG, None) if hasattr(cls, "tagged") else None
    if tag is not None:  # a member of a tagged union (reasons.py): its code says which
        props[TAG] = {"const": tag}
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name in json_names(cls):
        if name == "schema" and isinstance(defaults.get(name), str):
            props[name] = {"const": defaults[name]}
        else:
            hint = hints[name] if name in hints else typing.get_type_hints(getattr(cls, name).fget)["return"]
            props[name] = _type_schema(hint, defs)
    defs[cls.__name__] = {"type": "object", "properties": props, "required": list(props),
                          "additionalProperties": False}
    return ref


def _tagged_union(base: type, defs: Dict[str, Any]) -> Dict[str, Any]:
    """A base class with ``tagged(code)`` (reasons.Reason): any of its members, by code."""
    ref = {"$ref": f"#/$defs/{base.__name__}"}
    if base.__name__ not in defs:
        defs[base.__name__] = {}
        members = base.kinds()
        defs[base.__name__] = {"oneOf": [_define(m, defs) for m in members]}
    return ref


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(tp: Any, defs: Dict[str, Any]) -> Dict[str, Any]:
    if tp is Any:
        return {}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):  # codes.py: the enum's strings
        return {"type": "string", "enum": [m.value for m in tp]}
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if tp is tuple:
        return {"type": "array"}
    if dataclasses.is_dataclass(tp):
        return _tagged_union(tp, defs) if hasattr(tp, "tagged") else _define(tp, defs)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
        options = [_type_schema(a, defs) for a in args if a is not type(None)]
        if type(None) in args:
            if len(options) == 1 and list(options[0]) == ["type"]:
                return {"type": [options[0]["type"], "null"]}
            options.append({"type": "null"})
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0], defs)}
        return {"type": "array", "prefixItems": [_type_schema(a, defs) for a in args],
                "items": False, "minItems": len(args)}
    if origin is dict:
        value = _type_schema(args[1], defs) if args else {}
        return {"type": "object", **({"additionalProperties": value} if value else {})}
    raise TypeError(f"no JSON Schema rule for the type {tp!r}: add one to feedprof/store/schema.py")


def dumps(schema: Dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def current() -> Dict[str, Dict[str, Any]]:
    """File name -> schema, for each kind of file this feedprof writes."""
    return {file_name(tag): generate(tag, root) for tag, root in roots().items()}


def write(directory: str = SCHEMA_DIR) -> List[str]:
    """Write the schema file of each record's version (other files in ``directory`` are left alone)."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, schema in current().items():
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(dumps(schema))
        paths.append(path)
    return paths


# --------------------------------------------------------------- validating


def load_schema(tag: str) -> Dict[str, Any]:
    """The shipped schema for ``tag`` (``feedprof.run/1``), from the installed package."""
    from importlib.resources import files

    resource = files("feedprof").joinpath("schemas", file_name(tag))
    if not resource.is_file():
        raise UnknownSchema(f"this feedprof ships no schema for {tag!r} (it has: {', '.join(shipped())})")
    return json.loads(resource.read_text(encoding="utf-8"))


def shipped() -> List[str]:
    """The tags of every schema file this feedprof ships, e.g. ``feedprof.run/1``."""
    from importlib.resources import files

    tags = []
    for entry in files("feedprof").joinpath("schemas").iterdir():
        kind, _, version = entry.name.removesuffix(".json").rpartition("-")
        if entry.name.endswith(".json") and version.isdigit():
            tags.append(f"feedprof.{kind}/{version}")
    return sorted(tags)


def validate(data: Any) -> str:
    """Check parsed JSON against the schema its ``schema`` field names; returns that tag.

    Raises ``jsonschema.ValidationError`` (its ``.json_path`` says where) if the
    data does not fit, :class:`UnknownSchema` if no shipped schema is named.
    """
    try:
        import jsonschema
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    tag = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(tag, str):
        raise UnknownSchema("not a feedprof file: no \"schema\" field naming its version")
    error = jsonschema.exceptions.best_match(_validator(tag).iter_errors(data))
    if error is not None:
        raise error
    return tag


@functools.lru_cache(maxsize=None)
def _validator(tag: str) -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(load_schema(tag))


def validate_file(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return validate(json.load(fh))


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m feedprof.store.schema",
                                     description="Validate feedprof JSON files against the shipped schemas, "
                                     "or (maintainers) regenerate the schema files from the records.")
    parser.add_argument("files", nargs="*", metavar="FILE.json", help="run.json / results.json files to validate")
    parser.add_argument("--write", action="store_true",
                        help="write the schema files from the dataclasses in feedprof/store/")
    args = parser.parse_args(argv)
    if args.write:
        for path in write():
            print(f"wrote {os.path.relpath(path)}")
    if not args.files:
        if not args.write:
            parser.print_usage(sys.stderr)
        return 0 if args.write else 2
    try:
        from jsonschema import ValidationError
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    status = 0
    for path in args.files:
        try:
            print(f"{path}: valid {validate_file(path)}")
        except ValidationError as exc:
            print(f"{path}: invalid at {exc.json_path}: {exc.message}", file=sys.stderr)
            status = 1
        except (OSError, ValueError) as exc:  # UnknownSchema and json.JSONDecodeError are ValueErrors
            print(f"{path}: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
