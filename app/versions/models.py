"""List, activate and delete model versions in a registry (app/versions/registry.py).

    python -m app models list --models-dir app-data/models
    python -m app models activate v2 --models-dir app-data/models
    python -m app models delete v3 --models-dir app-data/models

`activate` loads and checks the version (as a server's switch does) and only then moves the `active` pointer
on disk (`--no-check` skips the check): a running server on this registry notices within a second and
switches as `POST /v1/models/{version}/activate` does (loaded and warmed first; a version that cannot serve
is not switched to and the pointer is put back, the reason in events.jsonl); a server started later serves
it. `delete` refuses the active version.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # outside the project's venv: a one-line hint, not a traceback
    from textdata.inputs import hint_on_missing_module

    sys.excepthook = hint_on_missing_module

from pathlib import Path

from app.versions.registry import Registry, RegistryError
from app.versions.version_check import check_version
from textdata.errors import exits_2_on_user_error
from textdata.flags import Parser


def served_cv(m: dict) -> str:
    """The cross-validated macro-F1 of what the version serves: the blend's where it serves one (a version
    made before `cv_served_macro_f1` was recorded shows the encoder's, marked so); "" when none is known."""
    served = m.get("cv_served_macro_f1")
    if served is not None:
        return f"{served:.4f}" + (" (blend)" if m.get("cv_served") == "blend" else "")
    cv = m.get("cv_macro_f1")
    return "" if cv is None else f"{cv:.4f} (encoder)"


def version_row(m: dict) -> str:
    if m.get("unreadable"):  # listed, named, not a traceback (issue 40, M3)
        return f"{'*' if m.get('active') else ' '} {m['version']:<5} {m['unreadable']}"
    ev = m.get("eval") or {}
    cand, champ = ev.get("macro_f1"), (ev.get("champion") or {})
    scores = f"eval macro-F1 {cand:.4f}" if cand is not None else "eval -"
    if champ.get("macro_f1") is not None:
        scores += f" (vs {champ['version']} {champ['macro_f1']:.4f})"
    decision = (m.get("last_decision") or {}).get("why", "")
    return (f"{'*' if m.get('active') else ' '} {m['version']:<5} {m.get('source', ''):<9} "
            f"rows {m.get('rows', '-')!s:<6} cv macro-F1 {served_cv(m) or '-'}  {scores}  {decision}")


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m app models", description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("command", choices=("list", "activate", "delete"))
    p.add_argument("version", nargs="?", help="v1, v2, ... (activate, delete)")
    p.add_argument("--models-dir", type=Path, default=Path("app-data/models"),
                   help="the registry (default: app-data/models, python -m app's default)")
    p.add_argument("--no-check", action="store_true",
                   help="activate: move the pointer without loading the version first (a running server still "
                        "checks it and puts the pointer back if it cannot serve)")
    a = p.parse_args(argv)
    reg = Registry(a.models_dir)
    if a.command == "list":
        rows = reg.listing()
        if not rows:
            print(f"no versions in {a.models_dir}")
        for m in rows:
            print(version_row(m))
        return 0
    if not a.version:
        p.error(f"{a.command} needs a version, e.g. v2")
    if a.command == "activate":
        if not a.no_check:  # a version that cannot serve must not become what every later start serves
            try:
                check_version(reg.path(a.version))
            except RegistryError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure to load or answer: not activated, say why
                why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise RegistryError(f"{a.version} was not activated: it cannot serve ({why}); "
                                    f"{reg.active() or 'no version'} stays active") from None
        reg.set_active(a.version, why="python -m app models activate")
        print(f"{a.version} is active in {a.models_dir}: a running server on it switches within a second, "
              "unless the version cannot serve (then it puts the pointer back: see events.jsonl)")
    else:
        reg.delete(a.version)
        print(f"deleted {a.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
