"""The watch is woken by the file system, not by a poll: each test re-checks only once a minute
(``interval=60``), so an edit it notices within the test's few seconds was reported by the kernel."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr_control.xds.watch import FileWatch, watched_dirs
from tests.xds.xds_support import wait_for

NO_POLL = 60.0


class Reads:
    """What the watch's callback saw in the file, each time it was called."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.texts: list[str] = []
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.texts.append(self.path.read_text())


def configmap(mount: Path, *versions: str) -> None:
    """A Kubernetes ConfigMap mount: config.yaml -> ..data/config.yaml, ..data -> ..<first version>."""
    for version in versions:
        (mount / f"..{version}").mkdir(parents=True)
        (mount / f"..{version}" / "config.yaml").write_text(f"# {version}\nversion: 2\n")
    os.symlink(f"..{versions[0]}", mount / "..data")
    os.symlink("..data/config.yaml", mount / "config.yaml")


def swap(mount: Path, version: str) -> None:
    """What the kubelet does on an update: a new ..data link renamed over the old one."""
    os.symlink(f"..{version}", mount / "..data_tmp")
    os.replace(mount / "..data_tmp", mount / "..data")


@pytest.fixture
def watch(tmp_path: Path) -> Iterator[tuple[Path, Reads]]:
    path = tmp_path / "config.yaml"
    path.write_text("version: 2\n")
    reads = Reads(path)
    w = FileWatch(path, reads, interval=NO_POLL, settle=0.05)
    w.start()
    yield path, reads
    w.stop()


def test_a_rename_over_the_file_is_read_without_a_poll(watch: tuple[Path, Reads], tmp_path: Path) -> None:
    path, reads = watch
    tmp = tmp_path / ".config.yaml.tmp"
    tmp.write_text("version: 2\n")  # same size and content: only the inode tells
    os.replace(tmp, path)
    wait_for(lambda: reads.texts == ["version: 2\n"], timeout=5)


def test_an_edit_in_place_is_read_once_it_held_still_without_a_poll(watch: tuple[Path, Reads]) -> None:
    path, reads = watch
    path.write_text("version: 2\nlisteners: []\n")
    wait_for(lambda: reads.texts == ["version: 2\nlisteners: []\n"], timeout=5)


def test_configmap_swaps_are_read_one_after_another(tmp_path: Path) -> None:
    # The second swap lands after the directory the first one resolved to was watched anew.
    mount = tmp_path / "mount"
    configmap(mount, "v1", "v2", "v3")
    reads = Reads(mount / "config.yaml")
    w = FileWatch(mount / "config.yaml", reads, interval=NO_POLL)
    w.start()
    try:
        swap(mount, "v2")
        wait_for(lambda: reads.texts == ["# v2\nversion: 2\n"], timeout=5)
        swap(mount, "v3")
        wait_for(lambda: reads.texts == ["# v2\nversion: 2\n", "# v3\nversion: 2\n"], timeout=5)
    finally:
        w.stop()


def test_a_file_linked_from_elsewhere_is_watched_where_it_is_written(tmp_path: Path) -> None:
    # config.yaml is a link into another directory; the edit lands there, not beside the link.
    (tmp_path / "real").mkdir()
    (tmp_path / "served").mkdir()
    real = tmp_path / "real" / "router.yaml"
    real.write_text("version: 2\n")
    link = tmp_path / "served" / "config.yaml"
    os.symlink(real, link)
    assert set(watched_dirs(link)) == {str(tmp_path / "served"), str(tmp_path / "real")}
    reads = Reads(link)
    w = FileWatch(link, reads, interval=NO_POLL, settle=0.05)
    w.start()
    try:
        real.write_text("version: 2\nlisteners: []\n")
        wait_for(lambda: reads.texts == ["version: 2\nlisteners: []\n"], timeout=5)
    finally:
        w.stop()


def test_stop_ends_the_watch_at_once(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: 2\n")
    w = FileWatch(path, lambda: None, interval=NO_POLL)
    w.start()
    assert w.alive()
    stopped = threading.Thread(target=w.stop)
    stopped.start()
    stopped.join(5)  # a bound, not a timing claim: a watch waiting out its minute would hang here
    assert not stopped.is_alive() and not w.alive()
