"""Where the suite's time goes, by file, from pytest's JUnit XML (docs/testing.md's table):

    ./tests/run --all -m "" --junitxml=/tmp/suite.xml    # everything, one test after another
    python tests/time_table.py /tmp/suite.xml [--top 25]

Each row: the file's tests, their time (setup, call and teardown summed) and its share of the
suite's; the serial column is the time of its tests marked serial (the second phase of
./tests/run --all), read from the source."""
import argparse
import ast
import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from typing import Dict, Set

HERE = os.path.dirname(os.path.abspath(__file__))


def serial_tests(path: str) -> Set[str]:
    """The names of a test file's functions decorated @pytest.mark.serial."""
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (OSError, SyntaxError):
        return set()
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
            and any(ast.unparse(d).startswith("pytest.mark.serial") for d in node.decorator_list)}


def table(xml_path: str, top: int) -> str:
    seconds: Dict[str, float] = Counter()
    serial: Dict[str, float] = Counter()
    count: Dict[str, int] = Counter()
    marks: Dict[str, Set[str]] = {}
    for case in ET.parse(xml_path).iter("testcase"):
        module = case.get("classname", "").replace(".", "/").replace("/ipynb", ".ipynb")
        name = case.get("name", "").split("[", 1)[0]
        t = float(case.get("time") or 0.0)
        seconds[module] += t
        count[module] += 1
        path = os.path.join(os.path.dirname(HERE), module + ".py")
        if module not in marks:
            marks[module] = serial_tests(path)
        if name in marks[module]:
            serial[module] += t
    total = sum(seconds.values())
    rows = ["| file | tests | time | share | of it serial |", "|---|---|---|---|---|"]
    for module, t in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        rows.append(f"| `{module}` | {count[module]} | {t:.0f} s | {100 * t / total:.0f} % | {serial[module]:.0f} s |")
    rest = sorted(seconds, key=lambda m: -seconds[m])[top:]
    if rest:
        rows.append(f"| {len(rest)} other files | {sum(count[m] for m in rest)} | "
                    f"{sum(seconds[m] for m in rest):.0f} s | {100 * sum(seconds[m] for m in rest) / total:.0f} % | "
                    f"{sum(serial[m] for m in rest):.0f} s |")
    rows.append(f"| all | {sum(count.values())} | {total:.0f} s | 100 % | {sum(serial.values()):.0f} s |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("xml")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    print(table(a.xml, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
