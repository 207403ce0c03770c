"""Reading an edited config again: only the entries an edit touched are parsed.

    reader = Rereader()
    reader.read(text, file) -> Marked     # always equal to marked.read(text, file)

Parsing is most of what a reload of a big file costs (libyaml takes about a tenth of a second
for 1,000 listeners, building the marked data as much again), and an edit usually touches
one entry. So the reader keeps the lines and the marked document it read last, finds the
lines the edit changed (the common head and tail stay), and when those lie inside one block
collection of entries (``listeners``, ``providers.models``, ``deployments``, ``pools``) it
parses only the entries they overlap, as a document of their own, and splices them in: the
other entries keep their data, and their marks move by the lines added or removed above them.

Parsing those lines alone reads them as the whole file would, because they are whole entries
of one block collection: every line of them is indented at least as deep as the entries, and
what follows them starts the next entry or section at a shallower or equal indent, closing
whatever they opened. Anything the splice cannot be sure of is read whole: anchors, aliases,
tags and merge keys (an alias elsewhere may name an anchor in the edited lines), line breaks
other than ``\\n``, tabs, a flow-style collection, an edit outside the collections (a section
key, ``version``), a line less indented than the entries, a key the other entries already use,
a collection emptied, and any syntax error (so the error is the whole file's, at its place).
``tests/config/test_reread.py`` holds the spliced reading equal to the whole one on generated
edits.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from sr_control.config.marked import Mark, Marked, YamlPath, YamlSyntaxError, read

Loc = YamlPath  # a place in the document, as the marks are keyed

# The collections whose entries an edit is spliced into: what a big config has many of.
COLLECTIONS: tuple[Loc, ...] = (("listeners",), ("providers", "models"), ("deployments",), ("pools",))
# Text in which a line is not simply a line of the YAML, or an entry may depend on another.
_WHOLE_FILE = ("&", "*", "!", "<<", "\t", "\r", "\x85", "\u2028", "\u2029", "\ufeff")


class Rereader:
    """Reads one file's successive texts. ``spliced`` says how the latest read went."""

    def __init__(self) -> None:
        self._last: tuple[list[str], Marked] | None = None
        self.spliced = False

    def read(self, text: str, file: str) -> Marked:
        """As ``marked.read``: raises YamlSyntaxError, then the next read compares with the
        last text that parsed."""
        lines = text.split("\n")
        marked = None
        if self._last is not None and not any(s in text for s in _WHOLE_FILE):
            marked = _splice(*self._last, lines, file)
        self.spliced = marked is not None
        if marked is None:
            marked = read(text, file)
        self._last = (lines, marked)
        return marked


def _splice(old_lines: list[str], old: Marked, lines: list[str], file: str) -> Marked | None:
    """``lines`` read by parsing only the entries of one collection they changed, or None."""
    n0, n1 = len(old_lines), len(lines)
    shortest = min(n0, n1)
    head = 0
    while head < shortest and old_lines[head] == lines[head]:
        head += 1
    if head == n0 == n1:
        return old
    tail = 0
    while tail < shortest - head and old_lines[n0 - 1 - tail] == lines[n1 - 1 - tail]:
        tail += 1
    changed_end = n0 - tail  # old lines [head, changed_end) changed
    for loc in COLLECTIONS:
        entries = _entries(old, old_lines, loc)
        if entries is not None and entries.starts[0] <= head and changed_end <= entries.end:
            return _splice_entries(old, lines, loc, entries, head, changed_end, n1 - n0, file)
    return None


class _Entries:
    """Where each entry of a block collection starts (its dash or key line), where the
    collection ends, and the entries' column."""

    def __init__(self, keys: list[Any], starts: list[int], end: int, column: int, is_list: bool) -> None:
        self.keys, self.starts, self.end, self.column, self.is_list = keys, starts, end, column, is_list


def _entries(marked: Marked, lines: list[str], loc: Loc) -> _Entries | None:
    node: Any = marked.data
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if not isinstance(node, (list, dict)) or not node or loc not in marked.marks:
        return None
    column = marked.marks[loc][3]  # the collection starts at its first dash or key
    is_list = isinstance(node, list)
    keys: list[Any] = list(range(len(node))) if is_list else list(node)
    starts: list[int] = []
    for key in keys:
        mark = marked.marks.get(loc + (key,))
        if mark is None:
            return None
        line = mark[0]
        text = lines[line] if line < len(lines) else ""
        if text[:column].strip() or (starts and line <= starts[-1]):
            return None  # flow style, or two entries on one line
        if is_list:
            # The item's content starts on its dash's line (not ``-`` alone on a line).
            if text[column : column + 1] != "-" or text[column + 1 : column + 2] not in (" ", "") or mark[1] <= column:
                return None
        elif mark[1] != column or text[column] in "-?{[#":
            return None
        starts.append(line)
    return _Entries(keys, starts, _end_of(marked, loc, len(lines)), column, is_list)


def _end_of(marked: Marked, loc: Loc, n_lines: int) -> int:
    """The first line after the collection: the line of the next key of a mapping around it."""
    for depth in range(len(loc), 0, -1):
        parent: Any = marked.data
        for part in loc[: depth - 1]:
            parent = parent[part]
        keys = list(parent)
        after = keys[keys.index(loc[depth - 1]) + 1 :]
        if after:
            return marked.marks[loc[: depth - 1] + (after[0],)][0]
    return n_lines


def _splice_entries(
    old: Marked, lines: list[str], loc: Loc, entries: _Entries, head: int, changed_end: int, delta: int, file: str
) -> Marked | None:
    starts, column = entries.starts, entries.column
    first = bisect_right(starts, head) - 1  # the entries [first, stop) are parsed again
    stop = bisect_right(starts, max(changed_end - 1, head))
    begin = starts[first]
    old_end = starts[stop] if stop < len(starts) else entries.end
    part = lines[begin : old_end + delta]
    content = [(i, text) for i, text in enumerate(part) if text.strip() and not text.lstrip().startswith("#")]
    for _, text in content:
        indent = len(text) - len(text.lstrip(" "))
        if indent < column:
            return None
        if (
            indent == column
            and entries.is_list
            and not (text[column] == "-" and text[column + 1 : column + 2] in (" ", ""))
        ):
            return None
    if content and (content[0][0] != 0 or len(part[0]) - len(part[0].lstrip(" ")) != column):
        return None  # the parsed lines start with an entry, as they did before the edit
    if not content:
        if first == 0 and stop == len(starts):
            return None  # the collection emptied: the section now reads as null, say so whole
        new: Any = [] if entries.is_list else {}
        new_marks: dict[Loc, Mark] = {}
        root: Mark | None = None
    else:
        try:
            # Up to the next line's break, as the whole file has it: a block scalar that keeps
            # its trailing breaks (``|+``) keeps as many here.
            piece = read("\n".join(part) + ("\n" if old_end + delta < len(lines) else ""), file)
        except YamlSyntaxError:
            return None
        new = piece.data
        root = piece.marks[()]
        if not isinstance(new, list if entries.is_list else dict) or root[2:] != (content[0][0], column):
            return None
        new_marks = piece.marks
    replaced = entries.keys[first:stop]
    collection: Any = _at(old.data, loc)
    if entries.is_list:
        spliced: Any = collection[:first] + new + collection[stop:]
    else:
        kept = [k for k in collection if k not in replaced]
        if any(k in new for k in kept):
            return None  # a key given twice: the whole file's reading says where
        items = list(collection.items())
        spliced = dict(items[:first] + list(new.items()) + items[stop:])

    shift = len(new) - len(replaced)  # list indexes after the parsed entries move by this
    depth = len(loc)
    if not delta and not shift:
        # The usual edit, a line or two changed in place: every other mark stays as it is.
        marks = dict(old.marks)
        for key in replaced:
            for inner in _locs(collection[key], loc + (key,)):
                marks.pop(inner, None)
    else:
        replaced_set = set(replaced)
        marks = {}
        for key, mark in old.marks.items():
            if len(key) > depth and key[:depth] == loc:
                entry = key[depth]
                if entry in replaced_set:
                    continue
                if entries.is_list and isinstance(entry, int) and entry >= stop and shift:
                    key = loc + (entry + shift,) + key[depth + 1 :]
            if delta and (mark[0] >= old_end or mark[2] >= old_end):
                kl, kc, vl, vc = mark
                mark = (kl + delta if kl >= old_end else kl, kc, vl + delta if vl >= old_end else vl, vc)
            marks[key] = mark
    for key, mark in new_marks.items():
        if key:
            here = (key[0] + first,) + key[1:] if entries.is_list and isinstance(key[0], int) else key
            marks[loc + here] = (mark[0] + begin, mark[1], mark[2] + begin, mark[3])
    if first == 0:
        # The collection starts where its first entry now does.
        kl, kc, _, _ = old.marks[loc]
        if root is not None:
            marks[loc] = (kl, kc, root[2] + begin, root[3])
        else:
            start = marks[loc + ((0,) if entries.is_list else (next(iter(spliced)),))]
            marks[loc] = (kl, kc, start[0], column)
    return Marked(_replace(old.data, loc, spliced), marks)


def _locs(value: Any, loc: Loc) -> list[Loc]:
    """``loc`` and the place of everything under it: the marks one entry has."""
    out = [loc]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += _locs(inner, loc + (key,))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            out += _locs(inner, loc + (i,))
    return out


def _at(data: Any, loc: Loc) -> Any:
    for part in loc:
        data = data[part]
    return data


def _replace(data: Any, loc: Loc, value: Any) -> Any:
    """``data`` with ``value`` at ``loc``: new mappings along the way, the rest shared."""
    if not loc:
        return value
    out = dict(data)
    out[loc[0]] = _replace(data[loc[0]], loc[1:], value)
    return out


__all__ = ["COLLECTIONS", "Rereader"]
