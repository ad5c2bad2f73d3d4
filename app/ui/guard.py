"""The UI's half of the one authorization rule (app/team/roles.py): every Gradio event runs only for a person
whose role its section's rule (or its own, UI_EVENTS) allows, whichever Gradio route calls it (/ui/gradio_api's
queue, its REST-style calls). An event no rule names refuses to start (`guard`).

Who the person is comes from app/team/auth.py `ui_request_user`: the sign-in cookie, else the user whose token
the gate recorded, else the key holder (or `local` in one-person mode)."""

from __future__ import annotations

import functools
import inspect

import gradio as gr
from gradio.context import LocalContext

from app.team import roles

LOCAL_ADMIN = (0, "local", roles.ADMIN)  # a UI built without a label store: one-person mode


def event_name(fn) -> str:
    """An event's name in UI_EVENTS: its function's, through functools.partial (the Label tab's act(action))."""
    while isinstance(fn, functools.partial):
        fn = fn.args[0] if fn.args and callable(fn.args[0]) else fn.func
    return getattr(fn, "__name__", "<event>")


def person(cfg, state):
    """(id, name, role) of the person whose event runs now, or None (a revoked user)."""
    identities = getattr(state, "identities", None)
    if identities is None:
        return LOCAL_ADMIN
    return identities.ui_request_user(cfg, state.sessions, LocalContext.request.get(None))


def _checked(fn, refused, quiet: bool, n_out: int):
    """`fn`, refusing first: with gr.Error, or for a timer's tick (`quiet`) by changing nothing."""
    def said(why):
        if quiet:
            return gr.skip() if n_out == 1 else [gr.skip()] * n_out
        raise gr.Error(f"Refused: {why}.")

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(*args, **kwargs):
            why = refused()
            return said(why) if why else await fn(*args, **kwargs)
        run_async.refused = refused
        return run_async

    @functools.wraps(fn)
    def run(*args, **kwargs):
        why = refused()
        return said(why) if why else fn(*args, **kwargs)
    run.refused = refused  # the decision alone (tests/app/test_app_roles.py asks it of every event)
    return run


def guard(demo: gr.Blocks, sections: dict, cfg, state, refusals: dict[str, str]) -> dict:
    """Wrap every event of `demo` in its rule. `sections`: fn index -> section name. Returns {index: Rule}."""
    from app.config import open_to_anyone

    open_server, rules = open_to_anyone(cfg), {}
    for index, block_fn in demo.fns.items():
        if block_fn.fn is None:  # a browser-only step (js=...): nothing runs on the server
            continue
        section = sections.get(index)
        if section is None or section not in roles.UI_SECTIONS:
            raise RuntimeError(f"UI event {event_name(block_fn.fn)!r} (#{index}) has no section in app/team/roles.py")
        rule = rules[index] = roles.ui_rule(section, event_name(block_fn.fn))
        if rule.role == roles.ANNOTATOR and rule.open:
            continue  # anyone the gate let in

        def refused(rule=rule):
            return roles.refusal(rule, person(cfg, state), open_server, refusals)

        quiet = any(t[1] == "tick" for t in block_fn.targets)
        block_fn.fn = _checked(block_fn.fn, refused, quiet, len(block_fn.outputs))
    return rules
