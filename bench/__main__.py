"""The benchmarks behind one entry: `python -m bench` lists them, one line each; `python -m bench NAME [flags]` runs
bench/NAME.py with those flags, as `python bench/NAME.py [flags]` does (each prints its ratios against its baseline
from the same run and writes its JSON; `python -m bench NAME --help` says how).

A benchmark is a script here that runs as a program (`if __name__ == "__main__":`); the other modules are what
benchmarks share (harness.py: the record, timers, servers, clients; resplits.py: the short-text resplits).
"""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benchmarks() -> dict[str, str]:
    """{name: the first line of its docstring} for every script in bench/ that runs as a program."""
    found = {}
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_"):
            continue
        source = path.read_text(encoding="utf-8")
        if '__name__ == "__main__"' not in source:
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        found[path.stem] = " ".join(doc.split("\n\n")[0].split())
    return found


def listing(width: int = 110) -> str:
    names = benchmarks()
    pad = max(map(len, names)) + 2
    lines = [f"{len(names)} benchmarks; run one with `python -m bench NAME [flags]` (NAME --help for its flags):"]
    for name, line in names.items():
        cut = line if len(line) <= width - pad else line[: width - pad - 1] + "…"
        lines.append(f"  {name:<{pad}}{cut}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    name, flags = argv[0].removesuffix(".py"), argv[1:]
    if name not in benchmarks():
        print(f"no benchmark {name!r} in {HERE}\n\n{listing()}", file=sys.stderr)
        return 2
    # the checkout first on the path: a benchmark imports bench.harness, and bench/serving.py must not shadow serving
    sys.path[:0] = [str(HERE.parent)]
    sys.argv = [str(HERE / f"{name}.py"), *flags]
    try:
        runpy.run_path(str(HERE / f"{name}.py"), run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
