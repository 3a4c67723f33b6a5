"""A loader setting that a Ray Train training function reads from its config.

NOTE [ A setting passed through train_loop_config ]

    def train_func(config):                                  Ray runs it in every training worker
        DataLoader(ds, num_workers=config["workers"])         (or config.get("workers", 0))
    TorchTrainer(train_func, train_loop_config={"workers": args.workers})
                                  └─ the key's value in the dict (kwargs.in_mapping) ─► followed
                                     as any expression (origin.py): the flag --workers, an assignment,
                                     or the key itself where the value is a literal (AtKey)

Only the function's own file is read: the trainer call must be in it (as Ray's
examples and most scripts write it). Nothing is imported or run. The same file's
``ScalingConfig(...)`` is where a reservation of more CPUs per worker goes
(``resources_per_worker``).
"""
from __future__ import annotations

import ast
from typing import Optional, Tuple

from feedprof.frameworks.kwargs import Passed, in_mapping
from feedprof.frameworks.scope import FUNCS, Module, argument, callee, positional_params

LOOP_KEYWORD = "train_loop_per_worker"
CONFIG_KEYWORD = "train_loop_config"


def dict_read(expr: ast.AST) -> Optional[Tuple[str, str]]:
    """(name, key) of ``config["key"]`` or ``config.get("key"[, default])``; None otherwise."""
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name):
        key = getattr(expr.slice, "value", None)
        return (expr.value.id, key) if isinstance(key, str) else None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get" \
            and isinstance(expr.func.value, ast.Name) and expr.args and isinstance(expr.args[0], ast.Constant) \
            and isinstance(expr.args[0].value, str):
        return expr.func.value.id, expr.args[0].value
    return None


def trainer_call(src: Module, func: ast.AST) -> Optional[ast.Call]:
    """The call that hands ``func`` to a Ray trainer (``TorchTrainer(train_func, ...)``)."""
    name = getattr(func, "name", None)
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Call) and callee(node).endswith("Trainer"):
            loop = argument(node, LOOP_KEYWORD, (LOOP_KEYWORD,))
            if isinstance(loop, ast.Name) and loop.id == name:
                return node
    return None


def from_loop_config(expr: ast.AST, src: Module, func: Optional[ast.AST]) -> Optional[Tuple[Passed, ast.Call]]:
    """What the trainer's ``train_loop_config`` passes for the key that ``expr`` reads from the
    training function's config parameter, and the trainer call; None where ``expr`` is no such
    read, or the dict cannot be read."""
    read = dict_read(expr)
    if read is None or func is None or not isinstance(func, FUNCS):
        return None
    params = positional_params(func)
    if not params or read[0] != params[0]:  # Ray passes the config as the only argument
        return None
    call = trainer_call(src, func)
    given = argument(call, CONFIG_KEYWORD, ()) if call is not None else None
    if given is None:
        return None
    passed = in_mapping(given, read[1], src, src.enclosing(call, FUNCS), call)
    return (passed, call) if passed.found and not passed.hidden else None


SCALING_CONFIG = "ScalingConfig"
RESOURCES_KEYWORD = "resources_per_worker"


def scaling_config_call(src: Module) -> Optional[ast.Call]:
    """The script's one ``ScalingConfig(...)`` call (None: none, or several)."""
    calls = [n for n in ast.walk(src.tree) if isinstance(n, ast.Call) and callee(n) == SCALING_CONFIG]
    return calls[0] if len(calls) == 1 else None


def reserving(call: ast.Call, cpus: int) -> Optional[dict]:
    """``resources_per_worker`` with ``cpus`` CPUs, the call's other resources kept; None where
    the call passes a value that cannot be read (a name, a splat)."""
    given = argument(call, RESOURCES_KEYWORD, ())
    if given is None:
        return None if any(k.arg is None for k in call.keywords) else {"CPU": cpus}
    try:
        resources = ast.literal_eval(given)
    except (ValueError, TypeError, SyntaxError):
        return None
    return {**resources, "CPU": cpus} if isinstance(resources, dict) else None
