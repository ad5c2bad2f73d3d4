"""The Team tab's People panel, for admins: who may sign in and with which role, as `python -m app users`
does (app/team/users_cli.py): add a person (their token shown once), change their role, give a new token,
revoke. The rule is app/team/roles.py UI_EVENTS' (admin; refused to a visitor of a server open to anyone); each
change is a log line naming the admin who made it (`"event": "user_added" | "user_role" | "user_token" |
"user_revoked"`, `by`; a role change also `role` and `was`)."""

from __future__ import annotations

import html
import logging

import gradio as gr

from app.ui.guard import person
from labelstore import users

log = logging.getLogger("app")


def listing(engine) -> list[list]:
    from datetime import datetime, timezone

    def day(t):
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if t else ""
    return [[u["name"], u["role"], day(u["created_at"]), day(u["revoked_at"]) or "active"]
            for u in users.list_users(engine)]


def people_panel(cfg, state) -> None:
    """Built inside the Team tab (its section), each event with its own admin rule."""
    engine = state.store

    def said(what: str, name: str, token: str | None = None, **more) -> str:
        admin = (person(cfg, state) or (None, "?"))[1]
        log.info("%s %s (by %s)", what, name, admin,
                 extra={"fields": {"event": what, "user": name, "by": admin, **more}})
        shown = (f"\n\n`{token}`\n\nShown once: hand it to {html.escape(name)}, who pastes it on the sign-in page."
                 if token else "")
        changed = f" {more['was']} → {more['role']}" if more else ""
        return f"{what.replace('_', ' ').capitalize()}: **{html.escape(name)}**{changed}.{shown}"

    def list_people():
        return listing(engine)

    def add_person(name, role):
        try:
            token = users.add_user(engine, name or "", role or "")
        except users.UserError as e:
            raise gr.Error(str(e)) from None
        return said("user_added", name.strip(), token), listing(engine)

    def change_role(name, role):
        """The role takes effect on the person's next request (the server reads the users every second)."""
        name = (name or "").strip()
        try:
            was = users.set_role(engine, name, role or "")
        except users.UserError as e:
            raise gr.Error(str(e)) from None
        return said("user_role", name, role=role, was=was), listing(engine)

    def rotate_token(name):
        try:
            token = users.new_token(engine, (name or "").strip())
        except users.UserError as e:
            raise gr.Error(str(e)) from None
        return said("user_token", name.strip(), token), listing(engine)

    def revoke_person(name):
        try:
            users.revoke(engine, (name or "").strip())
        except users.UserError as e:
            raise gr.Error(str(e)) from None
        return said("user_revoked", name.strip()), listing(engine)

    with gr.Accordion("People (admins): add, role, new token, revoke", open=False) as panel:
        p_list = gr.Dataframe(headers=["name", "role", "added", "revoked"], interactive=False,
                              elem_id="people-list")
        with gr.Row():
            p_name = gr.Textbox(label="Name", max_length=100, elem_id="people-name")
            p_role = gr.Dropdown(list(users.ROLES), value="annotator", label="Role", elem_id="people-role")
            p_add = gr.Button("Add", variant="primary", elem_id="people-add")
            p_set_role = gr.Button("Set role", elem_id="people-set-role")
            p_token = gr.Button("New token", elem_id="people-token")
            p_revoke = gr.Button("Revoke", variant="stop", elem_id="people-revoke")
        p_said = gr.Markdown(elem_id="people-said")
    panel.expand(list_people, None, p_list)
    p_add.click(add_person, [p_name, p_role], [p_said, p_list])
    p_set_role.click(change_role, [p_name, p_role], [p_said, p_list])
    p_token.click(rotate_token, p_name, [p_said, p_list])
    p_revoke.click(revoke_person, p_name, [p_said, p_list])
