"""The model registry on disk: immutable versions v1, v2, ... and an `active` pointer.

    <models-dir>/                 (default <data-dir>/models)
        active                    the served version's name, one line; replaced atomically (temp + rename)
        events.jsonl              what happened, appended: created, activated, deleted, training decisions
        eval_slice.json           the evaluation slice's rule, fixed at first use (app/versions/trainset.py)
        v1/                       a servable folder (what serving.export writes) plus version.json;
        v2/ ...                   trained versions also hold report.json (k-fold) and training/ (the table)
        .staging-<job>/           a version being built by a training job; renamed to vN whole, or removed
        .jobs/<job>/              a training job: job.json, train.log, progress.json, the tables

A version folder is written whole under a temporary name and renamed into place, and never changed after:
what it answers is what it answered when it was made. Mutable facts (which one is active, whether a
candidate was promoted) live outside the folders, in `active` and `events.jsonl`. Version numbers are
never reused, also after a delete (the log remembers them).

`python -m app --model FOLDER` registers FOLDER as a new version by copy (the registry must not change
when FOLDER is overwritten by the next export) unless a version with the same content (sha256 of its
files) is already there; see `Registry.register_folder`.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

from app.versions.lineage import record_import
from textdata.errors import ModelError, UsageError, capped
from textdata.plain_files import copy_plain_tree, plain_files, read_blocks, read_json
from textdata.run_folder import VERSION_FILE, check_classifier, model_in_run
from textdata.tables import atomic_path, write_json

ACTIVE_FILE = "active"
EVENTS_FILE = "events.jsonl"
# Who acts (the signed-in user, the key holder `api-key`, `local`): set by the route or UI event that trains,
# activates or deletes, and written as "by" on each event it logs, the training job's later ones too (its task
# starts inside, with this context). Unset: the server acting on its own (a start, a fallback).
ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("registry_actor", default=None)


@contextlib.contextmanager
def acting_as(name: str | None):
    token = ACTOR.set(name)
    try:
        yield
    finally:
        ACTOR.reset(token)


def by() -> dict:
    """The event's "by" field, where someone acts."""
    return {"by": ACTOR.get()} if ACTOR.get() else {}
MAX_META_BYTES = 4 << 20  # version.json is a few KB; one of gigabytes is not read into memory
_VERSION = re.compile(r"^v([1-9][0-9]{0,8})$")


class RegistryError(UsageError):
    """An unknown version, deleting the active one, a folder that is not a model: the message says which."""


class ChangedFiles(RegistryError):
    """A version that exists, whose files are not the ones it was registered with (changed on disk or in the
    model store): refused, a conflict (409) rather than an unknown version (404)."""


def version_number(name: str) -> int | None:
    m = _VERSION.fullmatch(name or "")
    return int(m.group(1)) if m else None


def folder_sha256(folder: Path, files: list[Path] | None = None) -> str:
    """The content of every file under `folder` (names and bytes), in a stable order. `files`: what
    textdata.plain_files listed (links and devices refused); they are read without following links."""
    h = hashlib.sha256()
    for rel in plain_files(folder) if files is None else files:
        h.update(rel.as_posix().encode() + b"\0")
        for block in read_blocks(folder / rel):
            h.update(block)
    return h.hexdigest()


class Registry:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    # ------------------------------------------------------------ reading
    def path(self, version: str) -> Path:
        if version_number(version) is None:
            raise RegistryError(f"{version!r} is not a version name (v1, v2, ...)")
        folder = self.root / version
        if not (folder / VERSION_FILE).is_file():
            known = capped(self.names()) or "none"
            raise RegistryError(f"no version {version} in {self.root} (versions: {known})")
        return folder

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        found = [p.name for p in self.root.iterdir() if version_number(p.name) and (p / VERSION_FILE).is_file()]
        return sorted(found, key=version_number)

    def meta(self, version: str) -> dict:
        """version.json; RegistryError naming the file when it is unreadable (one bad version must not stop
        the listing, a start or a registration: issue 40, M3)."""
        path = self.path(version) / VERSION_FILE
        try:
            meta = read_json(path, MAX_META_BYTES)
        except (OSError, ValueError, RecursionError) as e:
            raise RegistryError(f"{version}/{VERSION_FILE} is unreadable ({type(e).__name__}: {str(e)[:200]})") from None
        if not isinstance(meta, dict):
            raise RegistryError(f"{version}/{VERSION_FILE} is unreadable (a JSON {type(meta).__name__}, not an object)")
        return meta

    def display_name(self, version: str) -> str:
        """The name a version is shown by (version.json's `name`), or the version itself where that is unreadable."""
        try:
            return str(self.meta(version).get("name") or version)
        except RegistryError:
            return version

    def active(self) -> str | None:
        try:
            name = (self.root / ACTIVE_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return name if version_number(name) else None

    def events(self) -> list[dict]:
        try:
            lines = (self.root / EVENTS_FILE).read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line torn by a crash
        return out

    def listing(self) -> list[dict]:
        """Every version with its scores, the active one marked, newest first; `last_decision` is its evaluation's
        (promoted or kept, and why), `last_activated` its latest activation: kept apart, because an activation
        written over the decision hid why a candidate was kept (issue 59)."""
        active, decisions, activations = self.active(), {}, {}
        for e in self.events():
            if e.get("version") and e.get("event") in ("decision", "activated"):
                (decisions if e["event"] == "decision" else activations)[e["version"]] = e
        out = []
        for name in reversed(self.names()):
            try:
                m = self.meta(name)
            except RegistryError as e:  # listed as unreadable, named: the others are still shown
                m = {"unreadable": str(e)}
            out.append({**m, "version": name, "active": name == active, "last_decision": decisions.get(name),
                        "last_activated": activations.get(name)})
        return out

    # ------------------------------------------------------------ writing
    def log(self, event: str, **fields) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"event": event, "time": round(time.time(), 3), **by(), **fields}, ensure_ascii=False)
        with open(self.root / EVENTS_FILE, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def next_name(self) -> str:
        used = [version_number(n) for n in self.names()]
        used += [version_number(e.get("version", "")) for e in self.events() if e.get("event") == "created"]
        return f"v{max([u for u in used if u] + [0]) + 1}"

    def set_active(self, version: str, why: str = "") -> None:
        self.path(version)
        with atomic_path(self.root / ACTIVE_FILE) as tmp:
            tmp.write_text(version + "\n", encoding="utf-8")
        self.log("activated", version=version, why=why)

    def commit(self, staging: Path, meta: dict) -> str:
        """Turn a finished staging folder into the next version: version.json written inside, then one rename."""
        name = self.next_name()
        meta = {"version": name, "created": round(time.time(), 3), **meta}
        write_json(staging / VERSION_FILE, meta)
        os.rename(staging, self.root / name)  # fails rather than overwrite: names are never reused
        self.log("created", version=name, parent=meta.get("parent"), source=meta.get("source"))
        return name

    def staging(self, tag: str) -> Path:
        folder = self.root / f".staging-{tag}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return folder

    def register_folder(self, folder: str | os.PathLike) -> tuple[str, bool]:
        """(version, new?) for a model folder given as `python -m app --model FOLDER`: a copy becomes the next
        version, unless one with the same content is there (a restart with the same command adds nothing)."""
        if not Path(folder).exists():
            raise RegistryError(f"{folder}: no such model folder")
        for config in (Path(folder) / "config.json", Path(folder) / "model" / "config.json"):
            if config.is_symlink() or (config.exists() and not config.is_file()):  # read next: never a link
                raise RegistryError(f"{config}: a symbolic link or not a regular file; a model folder is copied "
                                    "as plain files only")
        src = model_in_run(Path(folder), use=("model",))
        if src.is_file():
            raise RegistryError(f"{src}: a version is a whole model folder; give {src.parent} (--fp32 / --int8 "
                                "choose its ONNX file)")
        if not (src / "config.json").is_file():
            raise RegistryError(f"{src}: no config.json, so not a model folder (expected the output of "
                                "serving.export or a transformers save_pretrained folder)")
        try:  # links, devices and oversized files refused before any is read (issue 40)
            files = plain_files(src)
        except ModelError as e:
            raise RegistryError(str(e)) from None
        check_classifier(src)
        digest = folder_sha256(src, files)
        for name in self.names():
            try:
                if self.meta(name).get("source_sha256") == digest:
                    return name, False
            except RegistryError:  # an unreadable version cannot be the same content; it is listed as such
                continue
        stage = self.staging(f"import-{os.getpid()}")
        try:
            try:
                copy_plain_tree(src, stage, [f for f in files if f.name != VERSION_FILE])
            except ModelError as e:  # a file swapped for a link, or grown past the cap, since the walk
                raise RegistryError(str(e)) from None
            trained_on = record_import(src, stage)  # so it is never judged on rows it trained on
            name = self.commit(stage, {"source": "imported", "name": src.resolve().name,
                                       "imported_from": str(src.resolve()), "trained_on": trained_on,
                                       "source_sha256": digest, "parent": self.active()})
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return name, True

    def delete(self, version: str) -> None:
        folder = self.path(version)
        if version == self.active():
            raise RegistryError(f"{version} is the active version: activate another one first")
        trash = self.root / f".deleted-{version}-{os.getpid()}"
        os.rename(folder, trash)  # gone from the listing at once; the bytes go next
        shutil.rmtree(trash, ignore_errors=True)
        self.log("deleted", version=version)

    def clean_staging(self) -> None:
        """Remove what killed jobs or imports left (never a version: those have their final names)."""
        if self.root.is_dir():
            for p in self.root.glob(".staging-*"):
                shutil.rmtree(p, ignore_errors=True)
            for p in self.root.glob(".deleted-*"):
                shutil.rmtree(p, ignore_errors=True)
