"""Noticing edits the ways files really change: in place, rename-replace, ConfigMap symlink swaps."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr_control.xds.watch import FileWatch
from tests.xds.xds_support import wait_for


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.n += 1


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, Counter]]:
    path = tmp_path / "config.yaml"
    path.write_text("version: 2\n")
    counter = Counter()
    watch = FileWatch(path, counter, interval=0.005)
    watch.start()
    yield path, counter
    watch.stop()


def test_an_edit_in_place_is_noticed_once(watched: tuple[Path, Counter]) -> None:
    path, counter = watched
    path.write_text("version: 2\nlisteners: []\n")
    wait_for(lambda: counter.n == 1)


def test_a_rename_over_the_file_is_noticed(watched: tuple[Path, Counter], tmp_path: Path) -> None:
    path, counter = watched
    new = tmp_path / ".config.yaml.swp"
    new.write_text("version: 2\n")  # same size and content: only the inode tells
    os.replace(new, path)
    wait_for(lambda: counter.n == 1)


def test_a_configmap_symlink_swap_is_noticed(tmp_path: Path) -> None:
    # Kubernetes mounts: config.yaml -> ..data/config.yaml, ..data -> ..2026_01_01_v1 (swapped atomically).
    mount = tmp_path / "mount"
    for version in ("..v1", "..v2"):
        (mount / version).mkdir(parents=True)
        (mount / version / "config.yaml").write_text("version: 2\n")
    os.symlink("..v1", mount / "..data")
    os.symlink("..data/config.yaml", mount / "config.yaml")
    counter = Counter()
    watch = FileWatch(mount / "config.yaml", counter, interval=0.005)
    watch.start()
    try:
        os.symlink("..v2", mount / "..data_tmp")
        os.replace(mount / "..data_tmp", mount / "..data")
        wait_for(lambda: counter.n == 1)
    finally:
        watch.stop()


def test_a_file_written_in_place_is_read_only_once_whole(tmp_path: Path) -> None:
    # A writer that stops mid-file for longer than a poll: the half it wrote parses as YAML, and
    # serving it would take listeners off Envoy. The watch reads once, after the file held still.
    path = tmp_path / "config.yaml"
    path.write_text("version: 2\n")
    reads: list[str] = []
    watch = FileWatch(path, lambda: reads.append(path.read_text()), interval=0.005, settle=0.2)
    watch.start()
    try:
        with path.open("w") as f:
            f.write("version: 2\nlisteners:\n- name: a\n")
            f.flush()
            threading.Event().wait(0.05)  # ten polls with the file half written
            f.write("- name: b\n")
        wait_for(lambda: len(reads) == 1)
        threading.Event().wait(0.3)
        assert reads == ["version: 2\nlisteners:\n- name: a\n- name: b\n"]
    finally:
        watch.stop()


def test_a_renamed_over_file_is_read_without_waiting_to_settle(tmp_path: Path) -> None:
    # A file renamed into place was whole before it appeared: no settling, whatever --settle says.
    path = tmp_path / "config.yaml"
    path.write_text("version: 2\n")
    counter = Counter()
    watch = FileWatch(path, counter, interval=0.005, settle=30.0)
    watch.start()
    try:
        new = tmp_path / ".config.yaml.tmp"
        new.write_text("version: 2\nlisteners: []\n")
        os.replace(new, path)
        wait_for(lambda: counter.n == 1, timeout=5.0)
    finally:
        watch.stop()
