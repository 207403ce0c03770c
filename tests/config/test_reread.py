"""Reading an edited file again parses only the entries the edit touched, and reads exactly
what reading the whole file reads: the same data, every value at the same line and column,
and the same error where there is one."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sr_control.config.load import validate_text
from sr_control.config.marked import Marked, YamlSyntaxError, read
from sr_control.config.reread import Rereader
from tests.config.generated import edit_series, text_edits

FILE = "/etc/vllm-sr/config.yaml"


def whole(text: str) -> Marked | str:
    try:
        return read(text, FILE)
    except YamlSyntaxError as exc:
        return str(exc.problem)


def again(reader: Rereader, text: str) -> Marked | str:
    try:
        return reader.read(text, FILE)
    except YamlSyntaxError as exc:
        return str(exc.problem)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edit_series())
def test_each_edit_reads_as_the_whole_file_does(texts: list[str]) -> None:
    reader = Rereader()
    for text in texts:
        assert again(reader, text) == whole(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), edit_series())
def test_edits_of_any_lines_read_as_the_whole_file_does_errors_included(data: st.DataObject, texts: list[str]) -> None:
    reader = Rereader()
    reader.read(texts[0], FILE)
    for _ in range(3):
        text = data.draw(text_edits(texts[0]))
        assert again(reader, text) == whole(text)


LISTENERS = "version: 2\nlisteners:\n" + "".join(f"  - {{name: l{i}, port: {9000 + i}}}\n" for i in range(50))


def test_a_one_listener_edit_parses_that_listener_alone() -> None:
    reader = Rereader()
    reader.read(LISTENERS, FILE)
    edited = LISTENERS.replace("port: 9020}", "port: 9920}")
    assert reader.read(edited, FILE) == read(edited, FILE)
    assert reader.spliced


def test_a_listener_added_in_the_middle_moves_the_ones_below() -> None:
    reader = Rereader()
    reader.read(LISTENERS, FILE)
    edited = LISTENERS.replace("  - {name: l20,", "  - name: new\n    port: 70000\n  - {name: l20,")
    report = validate_text(edited, FILE, reader=reader)
    assert reader.spliced
    assert [str(p) for p in report.errors] == [str(p) for p in validate_text(edited, FILE).errors]
    (problem,) = report.errors
    assert (problem.line, problem.path) == (24, "listeners[20].port")


def test_an_anchor_anywhere_reads_the_whole_file() -> None:
    reader = Rereader()
    text = LISTENERS + "x-defaults: &d {port: 1}\n"
    reader.read(text, FILE)
    edited = text.replace("port: 9020}", "port: 9920}")
    assert reader.read(edited, FILE) == read(edited, FILE)
    assert not reader.spliced
