"""The control plane's version store: newest first, the last N kept, read again after a restart."""

from __future__ import annotations

import json
from pathlib import Path

from sr_control.xds.versions import VersionStore


def test_the_last_n_versions_are_kept_with_their_text_and_outlive_a_restart(tmp_path: Path) -> None:
    store = VersionStore(tmp_path / "versions", keep=3)
    for i in range(5):
        store.record(f"{i:016x}", f"text {i}\n", generation=i + 1)
    store.record(f"{4:016x}", "text 4\n", generation=6)  # served again unchanged: not a new entry
    assert [e["version"] for e in store.entries()] == [f"{i:016x}" for i in (4, 3, 2)]
    assert store.source(f"{2:016x}") == "text 2\n"
    assert store.source(f"{1:016x}") is None  # dropped, and its file with it
    assert sorted(p.name for p in (tmp_path / "versions").glob("*.yaml")) == [f"{i:016x}.yaml" for i in (2, 3, 4)]

    again = VersionStore(tmp_path / "versions", keep=3)
    assert again.entries() == store.entries()
    # A rollback to an earlier text is a new entry on top, with the version that text compiles to.
    again.record(f"{2:016x}", "text 2\n", generation=1)
    assert [e["version"] for e in again.entries()] == [f"{i:016x}" for i in (2, 4, 3)]
    assert again.source(f"{2:016x}") == "text 2\n"


def test_a_damaged_index_starts_a_new_history_instead_of_failing(tmp_path: Path) -> None:
    (tmp_path / "versions").mkdir()
    (tmp_path / "versions" / "index.json").write_text("{not json")
    store = VersionStore(tmp_path / "versions")
    assert store.entries() == []
    store.record("00000000000000aa", "x: 1\n")
    assert json.loads((tmp_path / "versions" / "index.json").read_text())[0]["version"] == "00000000000000aa"


def test_without_a_directory_versions_are_kept_in_memory(tmp_path: Path) -> None:
    store = VersionStore(None, keep=1)
    store.record("00000000000000aa", "a\n")
    store.record("00000000000000bb", "b\n")
    assert [e["version"] for e in store.entries()] == ["00000000000000bb"]
    assert store.source("00000000000000aa") is None and store.source("00000000000000bb") == "b\n"
