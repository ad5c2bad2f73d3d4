"""A version must serve before it is made active, also from the shell and at start.

`python -m app models activate v2` while no server ran once moved the pointer to a truncated v2 unchecked,
and every later start exited 2, with or without --model. Now the CLI loads and checks the version first
(`check_version`, the same check a running server's switch makes: app/versions/swap.py `check_engine`), and a
server whose active version cannot serve at start falls back to the last version that was active before
and still serves, with a warning and an `activated` event saying why (`load_or_fall_back`).
"""

from __future__ import annotations

import logging

from app.versions.registry import Registry
from app.versions.swap import check_engine

log = logging.getLogger("app")


def _why(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def check_version(folder, load=None):
    """The version's classifier, loaded and checked (its labels, finite probabilities summing to 1);
    raises with the reason when it cannot serve."""
    if load is None:
        from serving.engine import Classifier

        load = Classifier.load
    clf = load(folder)
    check_engine(clf)
    return clf


def fallbacks(registry: Registry, failed: str) -> list[str]:
    """Versions to try instead of `failed`: those active before, the latest first, then the rest, newest first."""
    names = set(registry.names()) - {failed}
    order = [e["version"] for e in reversed(registry.events()) if e.get("event") == "activated"]
    order += sorted(names, key=lambda n: -int(n[1:]))
    return list(dict.fromkeys(v for v in order if v in names))


def load_or_fall_back(registry: Registry, version: str, load) -> tuple[str, object]:
    """(version, classifier) for the registry's active `version`, or for the last good one when it cannot
    serve (made active, with a warning); the first error again when none can."""
    try:
        return version, check_version(registry.path(version), load)
    except Exception as e:  # noqa: BLE001 - whatever stops it from serving, another version may serve
        first, why = e, _why(e)
    for other in fallbacks(registry, version):
        try:
            clf = check_version(registry.path(other), load)
        except Exception:  # noqa: BLE001, S112 - try the next one
            continue
        registry.set_active(other, why=f"at start, {version} could not serve ({why}): fell back to {other}")
        log.warning("the active version %s cannot serve (%s): serving %s, the last version that can; fix or "
                    "delete %s", version, why, other, version,
                    extra={"fields": {"event": "fallback", "failed": version, "version": other}})
        return other, clf
    raise first
