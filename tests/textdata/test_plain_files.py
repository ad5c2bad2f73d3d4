"""textdata/plain_files.py: a folder copied or hashed as plain files (links, devices, pipes refused, never
followed or blocked on; each file under a byte cap), and textdata.errors.capped, which keeps error
messages short (issue 40)."""

from __future__ import annotations

import os
import threading

import pytest

from textdata.errors import ModelError, capped
from textdata.plain_files import copy_plain_file, copy_plain_tree, plain_files, read_blocks


def test_plain_files_lists_nested_files_and_refuses_links_and_pipes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.json").write_text("{}")
    (tmp_path / "b.txt").write_text("b")
    assert [p.as_posix() for p in plain_files(tmp_path)] == ["a/x.json", "b.txt"]
    copy_plain_tree(tmp_path, tmp_path.parent / "copy", plain_files(tmp_path))
    assert (tmp_path.parent / "copy" / "a" / "x.json").read_text() == "{}"
    (tmp_path / "a" / "up").symlink_to("..")
    with pytest.raises(ModelError, match="a/up: a symbolic link"):
        plain_files(tmp_path)
    (tmp_path / "a" / "up").unlink()
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ModelError, match="pipe: not a regular file"):
        plain_files(tmp_path)


def test_reading_never_follows_a_link_blocks_on_a_pipe_or_passes_the_cap(tmp_path):
    (tmp_path / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(ModelError, match="passwd: cannot be read as a plain file"):
        copy_plain_file(tmp_path / "passwd", tmp_path / "out")
    os.mkfifo(tmp_path / "pipe")
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(ModelError, list, read_blocks(tmp_path / "pipe"))))
    t.start()
    t.join(5)
    assert done, "reading a pipe blocked"
    (tmp_path / "big").write_bytes(b"x" * 5000)
    with pytest.raises(ModelError, match="big: 5,000 bytes, over the 4,096"):
        list(read_blocks(tmp_path / "big", max_file_bytes=4096, block=1000))
    (tmp_path / "passwd").unlink()
    (tmp_path / "pipe").unlink()
    with pytest.raises(ModelError, match="big: 5,000 bytes, over the 4,096"):
        plain_files(tmp_path, max_file_bytes=4096)


def test_capped_lists_at_most_limit_items_and_counts_the_rest():
    assert capped(["a", "b"]) == "a, b"
    assert capped(map(str, range(10_000)), 3) == "0, 1, 2 and 9,997 more"
    assert len(capped(["x" * 5000] * 20)) < 1000
