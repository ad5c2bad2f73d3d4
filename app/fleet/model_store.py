"""A fleet's model artifacts in an object store, through fsspec: `--model-store s3://bucket/prefix` (any URL
fsspec opens: gs://, az://, file://, memory:// in tests), for replicas that share no volume.

A version is published under `<url>/<vN-sha12>/` (its plain files, the ones its digest covers) before its row
is written (app/fleet/registry.py), so no replica reads a version whose upload is unfinished. A replica fetches
a version it lacks into its --models-dir, which is then a local cache: under a temporary name, hashed, and
renamed into place only when the digest is the one in the version's row. Otherwise the version is refused in
one line, nothing is kept, and the version serving keeps serving. A cached copy whose files changed since is
fetched again.

Credentials and options come from the backend's own environment (AWS_* for s3fs, GOOGLE_APPLICATION_CREDENTIALS
for gcsfs); the backend package is installed by whoever has the store (`pip install s3fs`).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path, PurePosixPath

from app.versions.registry import ChangedFiles, RegistryError, folder_sha256
from textdata.errors import UsageError
from textdata.plain_files import MAX_FILES, check_size, plain_files

log = logging.getLogger("app")


def _line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


class ModelStore:
    def __init__(self, url: str):
        import fsspec

        try:
            self.fs, root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError, OSError) as e:  # an unknown protocol, its backend not installed
            raise UsageError(f"--model-store {url}: {_line(e)}") from None
        self.url, self.root = url.rstrip("/"), root.rstrip("/")

    def _remote(self, folder: str) -> str:
        return f"{self.root}/{folder}"

    def publish(self, local: Path) -> None:
        """Upload a version's folder under its own name; its row is written only after this returns."""
        try:
            for rel in plain_files(local):
                target = f"{self._remote(local.name)}/{rel.as_posix()}"
                self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                self.fs.put_file(str(local / rel), target)
        except Exception as e:  # noqa: BLE001 - whatever the backend raises (network, permissions): one line
            raise RegistryError(f"{self.url}/{local.name}: cannot publish it to the model store ({_line(e)})") from None

    def fetch(self, folder: str, sha256: str, cache: Path) -> Path:
        """`folder` from the store into `cache`, its digest checked; RegistryError (one line) when it is missing,
        unreadable or its files are not the ones registered."""
        base, where = self._remote(folder), f"{self.url}/{folder}"
        try:
            found = self.fs.find(base, detail=True)
        except Exception as e:  # noqa: BLE001
            raise RegistryError(f"{where}: cannot list it in the model store ({_line(e)})") from None
        if not found:
            raise RegistryError(f"{where}: not in the model store")
        if len(found) > MAX_FILES:
            raise RegistryError(f"{where}: over {MAX_FILES:,} files, so not a model folder")
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f".fetch-{folder}-{os.getpid()}-{threading.get_ident()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self._download(found, base, where, tmp)
            digest = folder_sha256(tmp)
            if digest != sha256:
                raise ChangedFiles(f"{where}: its files' sha256 is {digest[:12]}, not the {sha256[:12]} it was "
                                    f"registered with (changed in the model store): {folder.split('-')[0]} refused")
            try:
                os.rename(tmp, cache / folder)
            except OSError:
                if not (cache / folder).is_dir():  # else another process of this host fetched it meanwhile
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info("fetched %s from the model store into %s", where, cache / folder,
                 extra={"fields": {"event": "model_fetched", "folder": folder}})
        return cache / folder

    def _download(self, found: dict, base: str, where: str, tmp: Path) -> None:
        for path, info in sorted(found.items()):
            rel = PurePosixPath(path[len(base):].lstrip("/")) if path.startswith(base + "/") else None
            if rel is None or not rel.parts or ".." in rel.parts:
                raise RegistryError(f"{where}: an entry {path!r} outside the version's folder")
            try:
                check_size(Path(where) / rel, int(info.get("size") or 0))
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                self.fs.get_file(path, str(tmp / rel))
            except Exception as e:  # noqa: BLE001 - a file over the cap, the network: one line naming the file
                raise RegistryError(f"{where}/{rel}: cannot fetch it ({_line(e)})") from None

    def delete(self, folder: str) -> None:
        """Best effort: a deleted version's row is gone already, so nothing fetches it again."""
        try:
            self.fs.rm(self._remote(folder), recursive=True)
        except Exception as e:  # noqa: BLE001
            log.warning("%s/%s: not removed from the model store (%s)", self.url, folder, _line(e))


def open_model_store(url: str | None) -> ModelStore | None:
    return ModelStore(url) if url else None
