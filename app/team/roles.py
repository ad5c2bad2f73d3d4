"""The one authorization rule: every HTTP route and every UI event names the role it needs.

    annotator  their own queue and answers (and what any caller may do: classify, the model's labels, the UI)
    reviewer   also datasets: create, agreement, adjudication, export (the Team tab)
    admin      also deleting a dataset, models, training, jobs, kept texts (audit, review queue), monitoring,
               and people: the CLI's `python -m app users ...` or the Team tab's People panel (no HTTP route)

The `--api-key` holder is an admin; one-person mode (no key, no users) is `local`, an admin. A rule's `open`
says whether the route is served to visitors of a server open to anyone (no key, no users, not loopback, no
--allow-admin: app/config.py open_to_anyone), where every caller is `local`; `closed` names the refusal they
get otherwise. `PUBLIC` routes take no credential at all.

The gate (app/http/gate.py) enforces ROUTES on every HTTP request; app/ui/guard.py enforces UI_EVENTS on every
Gradio event, whichever Gradio route runs it. A route or an event missing here refuses to start
(`check_routes`, app/ui/guard.py), and tests/app/test_app_roles.py walks every one of them with each identity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANNOTATOR, REVIEWER, ADMIN = "annotator", "reviewer", "admin"
RANK = {ANNOTATOR: 0, REVIEWER: 1, ADMIN: 2}


@dataclass(frozen=True)
class Rule:
    role: str | None  # None: public, no credential
    what: str = ""  # what the route reads or changes, in docs/app.md's words
    open: bool = True  # served to a visitor of a server open to anyone
    closed: str = "admin"  # the refusal a visitor gets where `open` is False: "admin" or "team"

    def allows(self, role: str) -> bool:
        return self.role is None or RANK.get(role, -1) >= RANK[self.role]


PUBLIC = Rule(None, "liveness, readiness, sign-in")
ICON = Rule(None, "the site's icon (the sign-in page asks for it too)")
ANY = Rule(ANNOTATOR, "classify and read the served model")
UI = Rule(ANNOTATOR, "the UI's pages and assets; each event has its own rule (UI_EVENTS)")
QUEUE = Rule(ANNOTATOR, "their own queue and answers", open=False, closed="team")
DATASETS = Rule(REVIEWER, "datasets, agreement, adjudication, export", open=False, closed="team")
DELETE_DATASET = Rule(ADMIN, "delete a dataset and its answers", open=False, closed="team")
MODELS = Rule(ADMIN, "models, training, jobs", open=False)
MONITOR = Rule(ADMIN, "monitoring (counts and rates, no texts)")

# (method, path as the route declares it). HEAD is GET's.
ROUTES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): PUBLIC, ("GET", "/readyz"): PUBLIC,
    ("GET", "/login"): PUBLIC, ("POST", "/login"): PUBLIC, ("GET", "/logout"): PUBLIC, ("POST", "/logout"): PUBLIC,
    ("POST", "/v1/classify"): ANY, ("POST", "/"): ANY, ("POST", "/predict"): ANY,
    ("GET", "/v1/labels"): ANY, ("GET", "/v1/model"): ANY,
    ("GET", "/"): ANY, ("GET", "/docs"): ANY, ("GET", "/docs/oauth2-redirect"): ANY, ("GET", "/redoc"): ANY,
    ("GET", "/openapi.json"): ANY, ("GET", "/favicon.ico"): ICON,
    ("GET", "/v1/monitor"): MONITOR, ("GET", "/metrics"): MONITOR,
    ("GET", "/v1/datasets"): QUEUE,
    ("POST", "/v1/datasets/{dataset_id}/next"): QUEUE, ("POST", "/v1/datasets/{dataset_id}/labels"): QUEUE,
    ("POST", "/v1/datasets/{dataset_id}/undo"): QUEUE, ("POST", "/v1/datasets/{dataset_id}/skip"): QUEUE,
    ("POST", "/v1/datasets"): DATASETS, ("POST", "/v1/datasets/{dataset_id}/adjudicate"): DATASETS,
    ("GET", "/v1/datasets/{dataset_id}/agreement"): DATASETS, ("GET", "/v1/datasets/{dataset_id}/export"): DATASETS,
    ("DELETE", "/v1/datasets/{dataset_id}"): DELETE_DATASET,
    ("GET", "/v1/models"): MODELS, ("POST", "/v1/models/{version}/activate"): MODELS,
    ("DELETE", "/v1/models/{version}"): MODELS, ("POST", "/v1/train"): MODELS,
    ("GET", "/v1/jobs"): MODELS, ("GET", "/v1/jobs/{job_id}"): MODELS, ("GET", "/v1/jobs/{job_id}/log"): MODELS,
    ("DELETE", "/v1/jobs/{job_id}"): MODELS,
}
# Mounted apps, by prefix: everything under them (Gradio's routes: its events are UI_EVENTS').
MOUNTS: dict[str, Rule] = {"/ui": UI, "/docs/static": ANY}

OPEN_PATHS = frozenset(path for (_, path), rule in ROUTES.items() if rule.role is None)

# The UI's events: a section (a tab, or the page around them) gives its rule to every event registered in it;
# (section, event) names an exception (the event: its function's name, app/ui/guard.py event_name).
UI_SECTIONS: dict[str, Rule] = {
    "page": Rule(ANNOTATOR, "the page heading"),
    "classify": Rule(ANNOTATOR, "the Classify tab"),
    "label": Rule(ANNOTATOR, "the Label tab: their own sessions and team queue"),
    "batch": Rule(ANNOTATOR, "the Batch tab: score a file"),
    # on a server open to anyone the Train tab and the suspects of the active version say their own refusal
    # (app/versions/admin.py admin_refusal), in the tab, as /v1/models and /v1/train refuse
    "train": Rule(ADMIN, "the Train tab: retrain, versions, promote"),
    "monitor": Rule(ADMIN, "the Monitor tab: drift, live precision, audit sessions of kept texts"),
    "team": Rule(REVIEWER, "the Team tab: every annotator's answers, adjudication, new datasets"),
}
UI_EVENTS: dict[tuple[str, str], Rule] = {
    ("label", "review_unsure"): Rule(ADMIN, "the review queue's kept texts as a session"),
    ("label", "from_active"): Rule(ADMIN, "the active version's suspects (training rows)"),
    # the Team tab's People panel (app/ui/people.py): who may sign in, as `python -m app users` does
    **{("team", name): Rule(ADMIN, "people: list, add, role, new token, revoke", open=False, closed="team")
       for name in ("list_people", "add_person", "change_role", "rotate_token", "revoke_person")},
}


def ui_rule(section: str, event: str) -> Rule:
    return UI_EVENTS.get((section, event)) or UI_SECTIONS[section]


class RouteTable:
    """ROUTES as a lookup: static paths in a dict, templated ones as regular expressions, then MOUNTS."""

    def __init__(self, routes: dict = ROUTES, mounts: dict = MOUNTS):
        self.static, self.templated, self.mounts = {}, [], sorted(mounts.items(), key=lambda m: -len(m[0]))
        for (method, path), rule in routes.items():
            if "{" in path:
                pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", re.escape(path).replace(r"\{", "{")
                                                  .replace(r"\}", "}")) + "$")
                self.templated.append((method, pattern, rule))
            else:
                self.static[(method, path)] = rule

    def rule(self, method: str, path: str) -> Rule | None:
        """The rule of a request; None for a path no route serves (Starlette answers 404 / 405)."""
        method = "GET" if method == "HEAD" else method
        found = self.static.get((method, path))
        if found is not None:
            return found
        for m, pattern, rule in self.templated:
            if m == method and pattern.match(path):
                return rule
        for prefix, rule in self.mounts:
            if path == prefix or path.startswith(prefix + "/"):
                return rule
        return None


def unruled(app) -> list[str]:
    """The app's routes (method and path) and mounts that ROUTES and MOUNTS do not name."""
    missing = []
    for route in app.routes:
        methods = getattr(route, "methods", None)
        if methods is None:  # a Mount
            if route.path not in MOUNTS:
                missing.append(f"mount {route.path}")
            continue
        missing += [f"{m} {route.path}" for m in sorted(methods - {"HEAD"}) if (m, route.path) not in ROUTES]
    return missing


def check_routes(app) -> None:
    """Refuse to start a server with a route that names no role (add it to ROUTES)."""
    missing = unruled(app)
    if missing:
        raise RuntimeError(f"routes without a role in app/team/roles.py ROUTES: {', '.join(missing)}")


class Authorizer:
    """The gate's check of a request whose credential passed: its caller's role against the route's rule."""

    def __init__(self, identities, *, open_server: bool, refusals: dict[str, str]):
        self.identities, self.open_server, self.refusals = identities, open_server, refusals
        self.table = RouteTable()

    def refusal(self, scope) -> str | None:
        """Why this request is refused (403), or None."""
        rule = self.table.rule(scope["method"], scope["path"])
        if rule is None or rule.role is None:
            return None
        user = self.identities.resolve(scope.get("state", {}).get("user"))
        return refusal(rule, user, self.open_server, self.refusals)


def refusal(rule: Rule, user: tuple | None, open_server: bool, refusals: dict[str, str]) -> str | None:
    """Why `user` (id, name, role) may not do what `rule` covers, or None: one rule for HTTP and the UI."""
    from labelstore.users import LOCAL

    if rule.role is None:
        return None
    if user is None:
        return "sign in: this needs a token or the key"
    if open_server and user[1] == LOCAL and not rule.open:
        return refusals.get(rule.closed) or f"refused on a server open to anyone: this needs {rule.role}"
    if not rule.allows(user[2]):
        return f"{user[1]} is {user[2]}; this needs {rule.role}" + (" or admin" if rule.role == REVIEWER else "")
    return None
