"""The model registry of a fleet: metadata, events and the active pointer in the database; artifacts on disk.

Every replica reads the same rows (labelstore/fleet_store.py), so no process holds a pointer of its own. A
version's folder is immutable and content-addressed: `vN-<first 12 hex of the sha256 of its files>`, the
digest kept in full in its row. `verify` recomputes it before a load, so a folder changed or truncated on
the shared volume is refused in one line and the version serving keeps serving.

The on-disk registry of a single server (app/versions/registry.py: vN/ folders, `active`, events.jsonl) is imported
once, on the first start against an empty registry table: each folder renamed to its content address, each
event copied, the pointer set; the counts are logged and the two old files renamed `*.imported`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import time
from pathlib import Path

from app.versions.registry import (
    ACTIVE_FILE,
    EVENTS_FILE,
    ChangedFiles,
    Registry,
    RegistryError,
    folder_sha256,
    version_number,
)
from labelstore import fleet_store as fs
from labelstore import tx
from textdata.run_folder import VERSION_FILE
from textdata.tables import write_json

log = logging.getLogger("app")
_FOLDER = re.compile(r"^(v[1-9][0-9]{0,8})(?:-([0-9a-f]{12}))?$")
LOCK = "registry"  # held while a version is numbered and renamed into place, or the old registry imported


class DbRegistry(Registry):
    def __init__(self, root, engine, holder: str | None = None, object_store=None):
        super().__init__(root)
        self.engine = engine
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self.object_store = object_store  # app/fleet/model_store.py: versions in an object store, `root` their local cache

    # ------------------------------------------------------------ reading
    def _row(self, version: str) -> dict:
        if version_number(version) is None:
            raise RegistryError(f"{version!r} is not a version name (v1, v2, ...)")
        row = fs.version(self.engine, version)
        if row is None:
            raise RegistryError(f"no version {version} in the registry (versions: {', '.join(self.names()) or 'none'})")
        return row

    def path(self, version: str) -> Path:
        return self.root / self._row(version)["folder"]

    def names(self) -> list[str]:
        return [r["name"] for r in fs.versions(self.engine)]

    def meta(self, version: str) -> dict:
        return dict(self._row(version)["meta"])

    def active(self) -> str | None:
        return fs.pointer(self.engine)[0]

    def events(self) -> list[dict]:
        return fs.events(self.engine)

    def verify(self, version: str) -> Path:
        """The version's folder, its files hashed again: RegistryError (one line) when they changed."""
        row = self._row(version)
        folder = self.root / row["folder"]
        if self.object_store is not None:
            return self._cached(version, row, folder)
        if not folder.is_dir():
            raise RegistryError(f"{folder}: the folder of {version} is missing from the model store")
        digest = folder_sha256(folder)
        if digest != row["sha256"]:
            raise ChangedFiles(f"{folder}: its files' sha256 is {digest[:12]}, not the {row['sha256'][:12]} it was "
                                f"registered with (changed on disk): {version} refused")
        return folder

    def _cached(self, version: str, row: dict, folder: Path) -> Path:
        """The local copy of an object store's version: kept while its files match, else fetched (again)."""
        if folder.is_dir():
            if folder_sha256(folder) == row["sha256"]:
                return folder
            log.warning("%s: the cached copy of %s changed on disk; fetching it again from %s", folder, version,
                        self.object_store.url)
            self._trash(folder)
        return self.object_store.fetch(row["folder"], row["sha256"], self.root)

    def _trash(self, folder: Path) -> None:
        trash = self.root / f".deleted-{folder.name}-{os.getpid()}"
        with contextlib.suppress(OSError):
            os.rename(folder, trash)
            shutil.rmtree(trash, ignore_errors=True)

    # ------------------------------------------------------------ writing
    def log(self, event: str, **fields) -> None:
        version = fields.pop("version", None)
        fs.log(self.engine, event, version, **fields)

    def next_name(self) -> str:
        return f"v{tx.read(self.engine, fs.next_number)}"

    def set_active(self, version: str, why: str = "") -> None:
        self._row(version)
        fs.set_active(self.engine, version, why)

    @contextlib.contextmanager
    def locked(self, wait_s: float = 120.0):
        """The registry's lease, waited for: replicas started at once with the same --model register it once."""
        end = time.monotonic() + wait_s
        while (held := fs.take_lease(self.engine, LOCK, self.holder, socket.gethostname(), os.getpid(), wait_s)):
            if time.monotonic() > end:
                raise RegistryError(f"the model registry is locked by {held['holder']}; try again")
            time.sleep(0.05)
        try:
            yield
        finally:
            fs.release_lease(self.engine, LOCK, self.holder)

    def commit(self, staging: Path, meta: dict) -> str:
        with self.locked():
            def number(conn):
                return fs.next_number(conn)
            n = tx.read(self.engine, number)
            name = f"v{n}"
            meta = {"version": name, "created": round(time.time(), 3), **meta}
            write_json(staging / VERSION_FILE, meta)
            digest = folder_sha256(staging)
            folder = f"{name}-{digest[:12]}"
            os.rename(staging, self.root / folder)
            if self.object_store is not None:  # uploaded whole before its row exists: no replica sees half of it
                try:
                    self.object_store.publish(self.root / folder)
                except RegistryError:
                    self._trash(self.root / folder)
                    raise
            tx.run(self.engine, lambda conn: (fs.add_version(conn, name, n, folder, digest, meta, meta["created"]),
                                              fs.add_event(conn, "created", name, parent=meta.get("parent"),
                                                           source=meta.get("source"), sha256=digest)))
        return name

    def register_folder(self, folder) -> tuple[str, bool]:
        with self.locked():
            return super().register_folder(folder)

    def delete(self, version: str) -> None:
        folder = self.path(version)
        if version == self.active():
            raise RegistryError(f"{version} is the active version: activate another one first")
        fs.delete_version(self.engine, version)
        self._trash(folder)
        if self.object_store is not None:
            self.object_store.delete(folder.name)


def import_disk(registry: DbRegistry) -> dict | None:
    """Bring a single server's on-disk registry into an empty registry table, once; the counts, or None."""
    root = registry.root
    if not root.is_dir() or fs.versions(registry.engine, with_deleted=True):
        return None
    with registry.locked():
        if fs.versions(registry.engine, with_deleted=True):  # another replica imported it meanwhile
            return None
        found = sorted(((m.group(1), p) for p in root.iterdir() if (m := _FOLDER.fullmatch(p.name))
                        and (p / VERSION_FILE).is_file()), key=lambda t: version_number(t[0]))
        if not found:
            return None
        old = Registry(root)
        rows = []
        for name, path in found:
            digest = folder_sha256(path)
            target = root / f"{name}-{digest[:12]}"
            try:
                meta = old.meta(name) if path.name == name else {}
            except RegistryError as e:
                meta = {"unreadable": str(e)}
            if path != target:
                os.rename(path, target)
            if registry.object_store is not None:
                registry.object_store.publish(target)
            rows.append((name, version_number(name), target.name, digest, meta, meta.get("created") or time.time()))
        evs, active = old.events(), old.active()

        def write(conn):
            for r in rows:
                fs.add_version(conn, *r)
            for e in evs:
                e = dict(e)
                conn.execute(fs.registry_events.insert().values(time=e.pop("time", 0.0), event=e.pop("event", "?"),
                                                                version=e.pop("version", None), fields=e))
            fs.add_event(conn, "imported", None, versions=len(rows), events=len(evs), active=active)
            if active and any(r[0] == active for r in rows):
                fs.flip(conn, active, "imported from the on-disk registry")
        tx.run(registry.engine, write)
        for f in (ACTIVE_FILE, EVENTS_FILE):
            if (root / f).exists():
                os.replace(root / f, root / f"{f}.imported")
    counts = {"versions": len(rows), "events": len(evs), "active": active}
    log.info("imported the on-disk registry of %s into the database: %d versions, %d events, active %s", root,
             counts["versions"], counts["events"], active, extra={"fields": {"event": "registry_imported", **counts}})
    return counts


def fleet_start(cfg, engine):
    """(registry, cfg) for a replica: the database's registry, the old on-disk one imported into it once. Once
    the fleet has an active version a replica's --model is registered but does not move the pointer (a
    restarted replica must not demote what the fleet promoted since)."""
    import dataclasses

    from app.fleet.model_store import open_model_store

    registry = DbRegistry(cfg.registry_dir, engine, object_store=open_model_store(cfg.model_store))
    import_disk(registry)
    if cfg.model and registry.active() is not None:
        version, new = registry.register_folder(cfg.model)
        log.info("fleet: --model %s is %s (%s); the fleet's active version %s serves", Path(cfg.model).name, version,
                 "registered now" if new else "registered before", registry.active())
        cfg = dataclasses.replace(cfg, model=None)
    return registry, cfg
