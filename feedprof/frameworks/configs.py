"""Settings that live in a config system, read statically (nothing imported).

NOTE [ A setting read from a config system ]

    DataLoader(ds, num_workers=cfg.data.num_workers)      keys: data.num_workers, root: cfg
      cfg a parameter of @hydra.main(config_path="conf", config_name="config")
          ─► hydra: override ``data.num_workers=8``; the key found in conf/config.yaml
             (or conf/data/<default>.yaml through the defaults list), with its line
      cfg = OmegaConf.load("config.yaml") ─► yaml_file: change the key at config.yaml:LINE
      cfg a yacs node (the file calls cfg.merge_from_list) ─► yacs: ``DATALOADER.NUM_WORKERS 8``
          on the command line; the default found at ``_C.DATALOADER.NUM_WORKERS = 4``
    DataLoader(ds, num_workers=self.num_workers) in a class that LightningCLI(Model, Data)
      builds ─► lightning_cli: ``--data.num_workers 8`` (``--model.`` for the model class)

The override is given the way the system is driven; where the key's file and
line are found they are named too. origin.py finds the root; this module knows
each system's shape.
"""
from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

CLI_CALLS = ("LightningCLI", "CLI")
MAX_SCANNED_FILES = 200  # .py files read to find a yacs default


@dataclass(frozen=True)
class FromConfig:
    """``key`` of a config ``system`` (lightning_cli | hydra | yacs | yaml_file),
    read at ``path:line``; ``declared``: where its value is set now ("": not found)."""

    system: str
    key: str
    path: str
    line: int
    declared_path: str = ""
    declared_line: int = 0


def _decorator_call(func: ast.AST, name: str) -> Optional[ast.Call]:
    for d in getattr(func, "decorator_list", ()):
        f = d.func if isinstance(d, ast.Call) else d
        called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if called == name:
            return d if isinstance(d, ast.Call) else ast.Call(func=f, args=[], keywords=[])
    return None


def _string(call: ast.Call, keyword: str, index: int = -1) -> Optional[str]:
    for kw in call.keywords:
        if kw.arg == keyword and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    if 0 <= index < len(call.args) and isinstance(call.args[index], ast.Constant):
        value = call.args[index].value
        return value if isinstance(value, str) else None
    return None


def hydra(func: ast.AST, keys: Sequence[str], path: str, line: int) -> Optional[FromConfig]:
    """``keys`` of the config that ``@hydra.main`` hands ``func``."""
    main = _decorator_call(func, "main")
    if main is None or not any(isinstance(d, ast.Call) and "hydra" in ast.unparse(d.func)
                               for d in getattr(func, "decorator_list", ())):
        return None
    conf_dir = os.path.join(os.path.dirname(path), _string(main, "config_path", 0) or "")
    name = _string(main, "config_name", 1)
    found = _hydra_key(conf_dir, name, list(keys)) if name else None
    return FromConfig("hydra", ".".join(keys), path, line, *(found or ("", 0)))


def _hydra_key(conf_dir: str, name: str, keys: List[str]) -> Optional[Tuple[str, int]]:
    primary = os.path.join(conf_dir, name if name.endswith(".yaml") else name + ".yaml")
    found = yaml_key(primary, keys)
    if found is not None or len(keys) < 2:
        return found
    group = os.path.join(conf_dir, keys[0])  # a config group: conf/data/<option>.yaml
    option = _default_option(primary, keys[0])
    candidates = [option] if option else sorted(os.listdir(group)) if os.path.isdir(group) else []
    for option in candidates:
        found = yaml_key(os.path.join(group, option if option.endswith(".yaml") else option + ".yaml"), keys[1:])
        if found is not None:
            return found
    return None


def _default_option(primary: str, group: str) -> Optional[str]:
    """The option the defaults list picks for ``group`` (``- data: imagenet``)."""
    try:
        with open(primary, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    match = re.search(rf"^\s*-\s*{re.escape(group)}\s*:\s*([\w.-]+)\s*$", text, re.MULTILINE)
    return match.group(1) if match else None


def yaml_key(path: str, keys: Sequence[str]) -> Optional[Tuple[str, int]]:
    """The line of the nested mapping key ``keys`` in a YAML file (block style), or None."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    stack: List[Tuple[int, str]] = []
    for number, text in enumerate(lines, 1):
        match = re.match(r"^(\s*)([A-Za-z_][\w.-]*)\s*:(\s|$)", text)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        if [k for _, k in stack] == list(keys):
            return os.path.abspath(path), number
    return None


def yaml_file(call: ast.Call, keys: Sequence[str], path: str, line: int) -> Optional[FromConfig]:
    """``OmegaConf.load("config.yaml")`` (or ``yaml.safe_load(open(...))``): the key in that file."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
    inner = call.args[0] if call.args and isinstance(call.args[0], ast.Call) else None
    source = _string(inner, "file", 0) if name in ("safe_load", "load") and inner is not None else None
    source = source or (_string(call, "file_", 0) if name == "load" else None)
    if not source or not source.endswith((".yaml", ".yml")):
        return None
    for base in (os.path.dirname(path), os.getcwd()):
        found = yaml_key(os.path.join(base, source), keys)
        if found is not None:
            return FromConfig("yaml_file", ".".join(keys), path, line, *found)
    return None


def yacs(tree: ast.Module, name: str, keys: Sequence[str], path: str, line: int) -> Optional[FromConfig]:
    """``name`` is a yacs node the script merges command-line options into."""
    merged = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "merge_from_list"
                 for n in ast.walk(tree))
    if not merged or not all(k.isupper() or not k.isalpha() for k in keys):
        return None
    found = _yacs_default(os.path.dirname(path), keys)
    return FromConfig("yacs", ".".join(keys), path, line, *(found or ("", 0)))


def _yacs_default(root: str, keys: Sequence[str]) -> Optional[Tuple[str, int]]:
    """``_C.DATALOADER.NUM_WORKERS = 4`` in the project's files."""
    suffix = "." + ".".join(keys)
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("site-packages", "__pycache__")]
        for file in sorted(f for f in files if f.endswith(".py")):
            seen += 1
            if seen > MAX_SCANNED_FILES:
                return None
            found = _assigned(os.path.join(folder, file), suffix)
            if found is not None:
                return found
    return None


def _assigned(path: str, suffix: str) -> Optional[Tuple[str, int]]:
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(ast.unparse(t).endswith(suffix) for t in node.targets):
            return os.path.abspath(path), node.lineno
    return None


def _cli_classes(trees: Sequence[Tuple[str, ast.Module]]) -> set:
    """LightningCLI's names, and the script's own subclasses of it (``class MyCLI(LightningCLI)``,
    as Lightning's docs teach for add_arguments_to_parser), however deep the subclassing goes."""
    names = set(CLI_CALLS)
    bases_of = {node.name: {ast.unparse(b).split(".")[-1] for b in node.bases}
                for _, tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    grew = True
    while grew:
        found = {name for name, bases in bases_of.items() if bases & names} - names
        names |= found
        grew = bool(found)
    return names


def lightning_cli(trees: Sequence[Tuple[str, ast.Module]], cls: str, param: str) -> Optional[FromConfig]:
    """``LightningCLI(Model, Data)`` (or keywords, or a subclass of it) in the script's files builds ``cls``."""
    clis = _cli_classes(trees)
    for path, tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in clis):
                continue
            named = {kw.arg: ast.unparse(kw.value) for kw in node.keywords if kw.arg}
            positional = [ast.unparse(a) for a in node.args[:2]]
            roles = {"model": named.get("model_class", positional[0] if positional else ""),
                     "data": named.get("datamodule_class", positional[1] if len(positional) > 1 else "")}
            for role, given in roles.items():
                subclass = named.get(f"subclass_mode_{role if role == 'model' else 'data'}") == "True"
                if given.split(".")[-1] == cls:  # subclass mode: --data.init_args.num_workers
                    key = f"{role}.init_args.{param}" if subclass else f"{role}.{param}"
                    return FromConfig("lightning_cli", key, path, node.lineno)
    return None


def tokens(system: str, key: str, value: Any) -> List[str]:
    """The command-line words that set ``key`` to ``value`` in ``system``."""
    text = str(value).lower() if isinstance(value, bool) and system != "yacs" else str(value)
    if system == "lightning_cli":
        return [f"--{key}", text]
    if system == "hydra":
        return [f"{key}={text}"]
    return [key, text]  # yacs: KEY VALUE pairs


def with_overrides(args: Sequence[str], overrides: Sequence[Tuple[str, str, Any]]) -> List[str]:
    """``args`` with each (system, key, value) set: an existing one replaced, else appended."""
    out = list(args)
    for system, key, value in overrides:
        kept, skip = [], False
        for a in out:
            if skip:
                skip = False
                continue
            if (system == "lightning_cli" and a == f"--{key}") or (system == "yacs" and a == key):
                skip = True
                continue
            if a.startswith(f"--{key}=") or re.match(rf"^\+{{0,2}}{re.escape(key)}=", a):
                continue
            kept.append(a)
        out = kept + tokens(system, key, value)
    return out
