"""Names another program may read as ``.``, ``..`` or a path separator are refused by the files
toolkit and by ``PathInside``. The classes are generated from the Unicode database, not listed
by hand: every character whose NFKC form holds ``/``, ``\\`` or is ``.``/``..``, every
character named a solidus or slash, every invisible format character."""

from __future__ import annotations

import sys
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from anfitrion._constraints import PathInside
from anfitrion.exceptions import ArgumentError
from anfitrion.models._scripted import call
from anfitrion.toolkits import files
from anfitrion.toolkits._files import check_relative_path


@cache
def _classes() -> dict[str, tuple[str, ...]]:
    separators, one_dot, two_dots, formats = [], [], [], []
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF or chr(code) in "./":
            continue
        ch = chr(code)
        folded = unicodedata.normalize("NFKC", ch)
        name = unicodedata.name(ch, "")
        if "/" in folded or "\\" in folded or "SOLIDUS" in name or "SLASH" in name:
            separators.append(ch)
        elif folded == ".":
            one_dot.append(ch)
        elif folded == "..":
            two_dots.append(ch)
        if unicodedata.category(ch) == "Cf":
            formats.append(ch)
    return {"separators": tuple(separators), "one_dot": tuple(one_dot),
            "two_dots": tuple(two_dots), "formats": tuple(formats)}


def _dot_names() -> list[str]:
    classes = _classes()
    names = [*classes["two_dots"], ".. ", ". "]
    for ch in classes["one_dot"]:
        names += [ch, ch + ch, "." + ch, ch + "."]
    names += [".." + f for f in classes["formats"]] + ["." + f + "." for f in classes["formats"]]
    return names


def test_the_generated_classes_hold_the_known_look_alikes() -> None:
    classes = _classes()
    assert set("\u2215\u2044\uff0f\uff3c\ufe68\u2100") <= set(classes["separators"])
    assert set("\u2024\uff0e\ufe52") <= set(classes["one_dot"])
    assert set("\u2025\ufe30") <= set(classes["two_dots"])
    assert {"\u200b", "\u200d", "\ufeff", "\u202e"} <= set(classes["formats"])


def _spelled_for(constraint: PathInside, path: str) -> str:
    """*path* (``drafts/...``) as the constraint expects it: absolute for an absolute root."""
    if constraint.root.startswith("/") and constraint.base is None:
        return constraint.root + path.removeprefix("drafts")
    return path


def _refused_everywhere(path: str, box: Any, inside: list[PathInside]) -> list[str]:
    """The places that did not refuse *path*."""
    missed = []
    try:
        check_relative_path(path)
        missed.append("check_relative_path")
    except ArgumentError:
        pass
    write = box.get("write_draft")
    try:
        write.validate({"path": path, "text": "x"})
        missed.append("write_draft")
    except ArgumentError:
        pass
    missed += [repr(c) for c in inside if c.check(_spelled_for(c, path)) is None]
    return missed


@pytest.fixture
def targets(tmp_path: Path) -> tuple[Any, list[PathInside]]:
    box = files(tmp_path)
    inside = [PathInside("drafts"), PathInside(str(tmp_path / "drafts")),
              PathInside("drafts", base=str(tmp_path), resolve_symlinks=True)]
    # each of them accepts a plain path, so a refusal below is about the name
    for plain in ("drafts/ok.md", "drafts/sub/x"):
        check_relative_path(plain)
        box.get("write_draft").validate({"path": plain, "text": "x"})
        assert [c.check(_spelled_for(c, plain)) for c in inside] == [None, None, None]
    return box, inside


def test_every_character_that_reads_as_a_separator_is_refused(
        targets: tuple[Any, list[PathInside]]) -> None:
    box, inside = targets
    missed = {}
    for ch in _classes()["separators"]:
        for path in (f"drafts/a{ch}secret.txt", f"drafts/..{ch}..{ch}x", f"drafts/{ch}"):
            if where := _refused_everywhere(path, box, inside):
                missed[path] = where
    assert missed == {}


def test_every_component_that_reads_as_dot_or_dot_dot_is_refused(
        targets: tuple[Any, list[PathInside]]) -> None:
    box, inside = targets
    missed = {}
    for name in _dot_names():
        for path in (f"drafts/{name}/secret.txt", f"drafts/sub/{name}", f"drafts/{name}"):
            if where := _refused_everywhere(path, box, inside):
                missed[path] = where
    assert missed == {}


def test_look_alike_dots_inside_a_longer_name_are_ordinary_names(
        targets: tuple[Any, list[PathInside]]) -> None:
    """Only names that *read as* ``.``/``..`` are ambiguous: ``v1․2.md`` is a file name."""
    _, inside = targets
    for ch in _classes()["one_dot"] + _classes()["two_dots"]:
        path = f"drafts/v1{ch}2.md"
        assert check_relative_path(path) == ("drafts", f"v1{ch}2.md")
        assert inside[0].check(path) is None
    assert check_relative_path("drafts/.../....") == ("drafts", "...", "....")


def test_an_ambiguous_root_for_path_inside_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="separator"):
        PathInside("drafts\uff0fpublic")


@pytest.mark.anyio
async def test_a_full_width_traversal_is_stopped_before_a_person_is_asked(
        hostile: Any, tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    outcome = await hostile(files(root), [
        call("write_draft", {"path": "\uff0e\uff0e/\uff0e\uff0e/etc/cron.d/x", "text": "pwned"}),
        call("write_draft", {"path": "drafts\u2215..\u2215..\u2215x", "text": "pwned"}),
        call("read_file", {"path": "\u2025/secret.txt"}),
    ])
    assert [r.error_kind for r in outcome.results] == ["invalid_arguments"] * 3
    assert "reads as" in outcome.results[0].content
    assert outcome.asked == []
    assert list(root.iterdir()) == []
