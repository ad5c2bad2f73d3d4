"""A model folder copied or hashed as what it is: plain files and folders, each under a byte cap.

The app's registry copies a folder given as `--model` into itself (app/versions/registry.py), and serving.export
copies a model folder's sidecars into its output. Following links there copied any file the process could
read into the registry (`reference.json -> /etc/passwd`, shown back by the API), looped on `loop -> ..`
(RecursionError) and filled the disk from `-> /dev/zero` (issue 40). So: a symbolic link, a device, a pipe
or a socket inside the folder is refused, naming it, and so is a file over `max_file_bytes`; files are opened
without following a link put there after the walk, and read at most the cap. The folder itself may be a link
(a mount point named by the person who starts the server).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from textdata.errors import ModelError

MAX_FILE_BYTES = 8 << 30  # the largest ELECTRA (large, fp32) weighs 1.3 GB; 8 GB leaves room, not a disk's worth
MAX_FILES = 20_000  # a model folder has tens; a tree of millions is not one


def plain_files(folder: str | os.PathLike, max_file_bytes: int | None = None) -> list[Path]:
    """Every file under `folder` as a relative path, sorted; ModelError naming the first entry that is a link,
    not a regular file or folder, or over the cap (default MAX_FILE_BYTES)."""
    root, out, todo = Path(folder), [], [Path()]
    while todo:
        rel = todo.pop()
        with os.scandir(root / rel) as entries:
            for e in entries:
                name = rel / e.name
                if e.is_symlink():
                    raise ModelError(f"{root / name}: a symbolic link; a model folder is copied as plain files "
                                     "only: give a copy with its links resolved (`cp -rL FOLDER COPY`, e.g. for a "
                                     "Hugging Face cache snapshot, whose files are links)")
                if e.is_dir(follow_symlinks=False):
                    todo.append(name)
                    continue
                if not e.is_file(follow_symlinks=False):
                    raise ModelError(f"{root / name}: not a regular file (a device, pipe or socket)")
                check_size(root / name, e.stat(follow_symlinks=False).st_size, max_file_bytes)
                out.append(name)
                if len(out) > MAX_FILES:
                    raise ModelError(f"{root}: over {MAX_FILES:,} files, so not a model folder")
    return sorted(out)


def check_size(path: Path, size: int, max_file_bytes: int | None = None) -> None:
    max_file_bytes = MAX_FILE_BYTES if max_file_bytes is None else max_file_bytes
    if size > max_file_bytes:
        raise ModelError(f"{path}: {size:,} bytes, over the {max_file_bytes:,} a model file may take")


def read_blocks(path: str | os.PathLike, max_file_bytes: int | None = None, block: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of a regular file, never through a link (O_NOFOLLOW) and never more than the cap."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ModelError(f"{path}: cannot be read as a plain file ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ModelError(f"{path}: not a regular file (a device, pipe or socket)")
        read = 0
        while chunk := f.read(block):
            read += len(chunk)
            check_size(Path(path), read, max_file_bytes)  # a file growing while it is copied
            yield chunk


def read_json(path: str | os.PathLike, max_bytes: int, what: str = "it"):
    """The JSON in a model folder's or registry's small file: ValueError when it is over `max_bytes` (said
    before reading it) or is not JSON, ModelError when it is a link or not a regular file, OSError when it
    cannot be opened, RecursionError when nested too deep. One reader for every such file (version.json,
    thresholds.json, calibration.json, reference.json)."""
    size = os.stat(path).st_size
    if size > max_bytes:
        raise ValueError(f"{size:,} bytes, over the {max_bytes >> 20} MB {what} may take")
    return json.loads(b"".join(read_blocks(path, max_bytes)).decode("utf-8"))


def copy_plain_file(src: str | os.PathLike, dst: str | os.PathLike, max_file_bytes: int | None = None) -> None:
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "wb") as out:
        out.writelines(read_blocks(src, max_file_bytes))


def copy_plain_tree(src: str | os.PathLike, dst: str | os.PathLike, files: list[Path],
                    max_file_bytes: int | None = None) -> None:
    """Copy `files` (what `plain_files(src)` listed) from `src` into `dst`, each as plain bytes."""
    for rel in files:
        copy_plain_file(Path(src) / rel, Path(dst) / rel, max_file_bytes)
