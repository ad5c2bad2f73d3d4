"""The Label tab on a team dataset: the store's shared queue (labelstore/queue.py, the API's `next` and
`labels`) behind the same view, buttons and keys as an uploaded file's session (app/labeling/sessions.py).

A TeamSession is one annotator's place in one dataset, read by the Label tab as it reads a LabelSession: its
`row` is the record id of the text the queue leased to that person, so everything the API guarantees holds
here too: k answers per text from k different people, blind (the model's suggestion, never anyone's
answer), resume from any browser (the leased text comes back first), undo of one's own last answer, skip
(the text goes back to the queue for the others at once, and comes back to the skipper only once nothing
else is left for them: labelstore/queue.py skip). Who labels is the signed-in user of the page's cookie
(app/http/gate.py), or the one-person mode's `local`; the download is the dataset's export for a reviewer or
an admin, one's own answers for an annotator (blind).
"""

from __future__ import annotations

import html
import re
import threading
from collections import defaultdict

from app.label_kinds import dataset_space, kind_of
from app.labeling.sessions import ACTOR, ORDERS, SessionError
from labelstore import queue, review

_SID = re.compile(r"^ds-([0-9]{1,12})$")
ACCEPT_KEY = "**Enter** accept the suggestion · "  # keys_help's words for a text with a suggestion (app/ui/label_view.py)


def dataset_sid(dataset_id: int) -> str:
    """The Label tab's session id for a dataset (the browser keeps it, as it keeps a file session's id)."""
    return f"ds-{int(dataset_id)}"


def dataset_of(sid) -> int | None:
    m = _SID.fullmatch(sid) if isinstance(sid, str) else None
    return int(m.group(1)) if m else None


class TeamSession:
    """One annotator's view of a dataset's queue, with the LabelSession members the Label tab reads."""

    def __init__(self, engine, ds: queue.Dataset, user: tuple[int, str, str]):
        self.engine, self.ds, self.user = engine, ds, user
        self.id = dataset_sid(ds.id)
        self.labels = list(ds.labels)
        self.space = dataset_space(ds)  # the dataset's kind, as a file session's (app/label_kinds.py)
        self.kind = kind_of(self.space)
        self.multi_label = self.space.multi_label
        self.lock = threading.RLock()
        self.order = ORDERS[0]  # the queue's: least sure first, the same for everyone
        self.meta = {"id": self.id, "kind": "team", "order": self.order, "labels": self.labels,
                     "source": f"team dataset {ds.name} ({ds.overlap} answer(s) a text)"}
        self.texts: dict[int, str] = {}
        self.suggestion: dict[int, str] = {}
        self.confidence: dict[int, float] = {}
        self.probs: dict[int, dict] = {}
        self.status = defaultdict(int)  # 1: skipped by this person (the Label tab's "skipped earlier")
        self._sets: dict[int, list] = {}
        self._has: dict[int, bool] = {}  # the record has a suggestion (a dataset of the model's labels)
        self.shown: dict | None = None  # the progress last read (the bar's), for the text's title
        self.unsure: set[int] = set()  # records whose suggestion was under the threshold (label_view.unsure_rows)

    def current(self) -> int | None:
        """The text the queue gives this person now (the one they hold first), leased to them."""
        rec = queue.next_record(self.engine, self.ds, self.user[0])
        if rec is None:
            return None
        rid, sugg = rec["record_id"], rec["suggestion"] or {}
        if rid not in self.texts:
            if len(self.texts) > 64:  # only the texts on screen lately are needed
                for d in (self.texts, self.suggestion, self.confidence, self.probs, self._sets, self._has):
                    d.clear()
            self.texts[rid] = rec["text"]
            self.suggestion[rid] = sugg.get("label") or ""
            self.confidence[rid] = float(sugg.get("score") or 0.0)
            self.probs[rid] = {sugg["label"]: sugg["score"]} if "score" in sugg and "label" in sugg else {}
            self._sets[rid] = list(sugg.get("labels") or [])
            self._has[rid] = bool(sugg)
            if sugg.get("confident") is False:  # stored with the suggestion (app/team/routes.py)
                self.unsure.add(rid)
        if "no_threshold" in sugg:  # the Label tab's words for the record on screen
            self.meta["no_threshold"] = sugg["no_threshold"]
        elif "confident" in sugg:
            self.meta.pop("no_threshold", None)
        return rid

    def suggested(self, row: int) -> bool:
        return self._has.get(row, False)

    def suggested_set(self, row: int) -> list[str]:
        return list(self._sets.get(row, []))

    def progress(self) -> dict:
        p = review.my_progress(self.engine, self.ds, self.user[0])
        self.shown = {"total": p["records"], "labeled": p["mine"], "skipped": p["skipped"], "todo": p["todo"]}
        return self.shown

    def title(self, row: int) -> str:
        """The text box's title: where this person is in the dataset (its record id means nothing to them)."""
        p = self.shown or self.progress()
        again = " (skipped earlier)" if self.status[row] == 1 else ""
        return f"Text {min(p['labeled'] + 1, p['total'])} of {p['total']} in {self.ds.name}{again}"

    def decide(self, row: int, label) -> bool:
        """Answer the text on screen; False (nothing saved) when `row` is no longer the one this person holds
        (a second press of the same key)."""
        with self.lock:
            try:
                value = queue.check_value(self.ds, **self.kind.answer(label))
            except queue.BadLabel as e:
                raise SessionError(str(e)) from None
            if row != self.current():
                return False
            try:
                queue.submit(self.engine, self.ds, self.user[0], row, value, None)
            except queue.Full:
                raise SessionError("this text got its answers from others while you were away; here is the next "
                                   "one") from None
            return True

    def skip(self, row: int) -> bool:
        """Give the text on screen back to the queue; False when it comes straight back (nothing else is left
        for this person) or is no longer theirs (a second press of S)."""
        with self.lock:
            if row != self.current() or not queue.skip(self.engine, self.ds, self.user[0], row):
                return False
            self.status[row] = 1
            return self.current() != row

    def undo(self) -> int | None:
        """Take back this person's last answer or skip (labelstore/queue.py undo_last): its text is on screen."""
        with self.lock:
            done = queue.undo_last(self.engine, self.ds, self.user[0])
            if done is None:
                return None
            self.status[done["record_id"]] = 0  # an undone skip: no longer "skipped earlier"
            if not done["back"]:
                raise SessionError("the text you skipped got its answers from others meanwhile; press Undo again "
                                   "to take back what you did before it")
            return done["record_id"]

    def add_label(self, name: str) -> str:
        raise SessionError("a team dataset's labels were set when it was made")

    def set_order(self, order: str) -> None:
        if order != self.order:
            raise SessionError("a team dataset's queue has one order for everyone: least sure first")


def team_hint(session: TeamSession, row) -> str | None:
    """The Label tab's line above the buttons where a file session's words would be wrong; None elsewhere."""
    if row is None:
        return (f"Nothing left for you in {html.escape(session.ds.name)}: every text has its "
                f"{session.ds.overlap} answer(s), or yours.")
    if not session.suggested(row):  # a dataset made with labels of its own: the model has no suggestion
        return "Your answer: no model suggestion for this dataset's labels."
    return session.space.pick(_no_hint, _set_hint)(session, row)


def _no_hint(session: TeamSession, row) -> None:
    return None  # a single label's suggestion: the file session's words


def _set_hint(session: TeamSession, row) -> str:
    """The store keeps the suggested set, not how sure each label was."""
    shown = ", ".join(f"**{html.escape(x)}**" for x in session.suggested_set(row)) or "**none of the labels**"
    return f"Model suggests {shown} (pre-ticked)"


def choices(engine) -> list[tuple[str, int]]:
    """The datasets an annotator may open (every one: the queue keeps each person's answers blind)."""
    return [(f"{d['id']}: {d['name']} ({d['complete']}/{d['records']} done, k={d['overlap']})", d["id"])
            for d in queue.list_datasets(engine)]


class TeamSessions:
    """The Label tab's team datasets: who the event running now comes from (the page's cookie), and their
    TeamSession of a dataset."""

    def __init__(self, cfg, state):
        from app.config import open_to_anyone

        self.cfg, self.state = cfg, state
        self.refused = open_to_anyone(cfg)  # as the API (app/team/routes.py Callers): no key, no users, reachable
        self._open: dict[tuple[int, int], TeamSession] = {}
        self.at: dict[str, int] = {}  # where view() patches the Label tab's outputs (app/ui/page.py fills it)

    def user(self) -> tuple[int, str, str] | None:
        """(id, name, role) of the person at the page: the user of its cookie or of the token the gate recorded, else the key holder, else
        one-person mode's `local`. None without a label store."""
        from gradio.context import LocalContext

        identities = getattr(self.state, "identities", None)
        if identities is None:
            return None
        return identities.ui_request_user(self.cfg, self.state.sessions, LocalContext.request.get(None))

    def get(self, sid) -> TeamSession | None:
        dataset_id, user = dataset_of(sid), self.user()
        if dataset_id is None or user is None or (self.refused and user[1] == "local"):
            return None
        key = (dataset_id, user[0])
        if key not in self._open:
            try:
                ds = queue.get_dataset(self.state.store, dataset_id)
            except queue.NotFound:
                return None
            if len(self._open) > 1000:
                self._open.clear()
            self._open[key] = TeamSession(self.state.store, ds, user)
        return self._open[key]

    def acted(self, action, session, row, *args) -> str:
        """action(session, row, *args) by the person at the page: every journal line it writes names them
        (labeling.ACTOR). Its message, or what went wrong (a SessionError) with a warning sign."""
        who = self.user()
        token = ACTOR.set(who[1] if who is not None else None)
        try:
            return action(session, row, *args) or ""
        except SessionError as e:
            return f"⚠ {e}"
        finally:
            ACTOR.reset(token)

    def wire(self, tab, picker, render, outputs: list, quick: dict, text, hint, accept, sessions, keys,
             then_js: str | None = None) -> None:
        """The dataset picker: filled when the tab opens, a pick opens the dataset in the tab. `text`, `hint`,
        `accept`, `sessions`, `keys`: the outputs view() rewrites for a dataset; `then_js` runs in the page after a
        pick (app/ui/page.py REFOLD_JS)."""
        import gradio as gr

        self.at.update(text=outputs.index(text), hint=outputs.index(hint), accept=outputs.index(accept),
                       sessions=outputs.index(sessions), keys=outputs.index(keys))
        picked = picker.input(self.opener(render), picker, outputs, **quick)
        if then_js:
            picked.then(None, js=then_js)
        tab.select(lambda: gr.update(choices=self.choices()), None, picker, **quick)

    def opener(self, render):
        """The event that opens a dataset picked in the Label tab, drawn by `render`."""
        def open_dataset(dataset_id):
            session = self.get(dataset_sid(dataset_id)) if dataset_id is not None else None
            if session is None:
                import gradio as gr

                raise gr.Error("No such team dataset here (or it is not yours to open).")
            return render(session, f"Labeling {session.ds.name} with your team: its queue, blind, your place kept.")
        return open_dataset

    def choices(self) -> list[tuple[str, int]]:
        user = self.user()
        if user is None or (self.refused and user[1] == "local"):
            return []
        return choices(self.state.store)

    def view(self, out: list, session) -> list:
        """A TeamSession's tab as the file-session view drew it (app/ui/label_view.py) with the words that
        would be wrong for a shared queue replaced (the hint, Accept, the sessions menu: `self.at`)."""
        if not isinstance(session, TeamSession):
            return out
        import gradio as gr

        at, row = self.at, out[1]
        if row is not None:
            out[at["text"]] = {**out[at["text"]], "label": session.title(row)}
        hint = team_hint(session, row)
        if hint is not None:
            out[at["hint"]] = hint
            if row is not None:
                out[at["accept"]] = gr.update(visible="hidden")  # no suggestion to accept
        if row is not None and not session.suggested(row):  # Enter has nothing to accept
            out[at["keys"]] = out[at["keys"]].replace(ACCEPT_KEY, "")
        out[at["sessions"]] = {**out[at["sessions"]], "value": None}  # a dataset is not among the file sessions
        return out

    def export(self, sid, exports) -> str:
        """The Label tab's download for a dataset: every answer (the API's export) for a reviewer or an admin,
        the person's own answers for an annotator (blind: nobody else's)."""
        import gradio as gr

        from app.team.routes import STAFF, export_text

        session = self.get(sid)
        if session is None:
            raise gr.Error("No such team dataset here (or it is not yours to open).")
        name, role = session.user[1:]
        mine = None if role in STAFF else name
        # one row per answer, said in its name; a BOM, so a spreadsheet on Windows reads Korean
        out = exports.path(re.sub(r"[^\w.-]+", "_", f"{session.ds.name}-{name if mine else 'all'}-answers.csv"))
        out.write_text(export_text(self.state.store, session.ds, "csv", mine), encoding="utf-8-sig")
        return str(out)
