"""Containment attacks on the files toolkit beyond the plain ``..``: encodings, Unicode look-alikes,
long paths, hard links, and a symlink race run against the real file system."""

from __future__ import annotations

import contextlib
import os
import threading
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from anfitrion import Principal, ToolContext
from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolError
from anfitrion.models._scripted import call
from anfitrion.toolkits import files


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "work"
    (root / "drafts").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET")
    return root, outside


def _tool(root: Path, name: str, **options: Any) -> Tool:
    found = files(root, **options).get(name)
    assert found is not None
    return found


async def _run(t: Tool, **arguments: Any) -> Any:
    return await t.handler(t.validate(arguments), ToolContext(Principal("a"), "s", "c", t.name))


def _everything_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.mark.anyio
@pytest.mark.parametrize("path", [
    "%2e%2e/secret.txt", "%2e%2e%2fsecret.txt", "..%2fsecret.txt", "%252e%252e/secret.txt",
    "\uff0e\uff0e/secret.txt",      # fullwidth full stops
    "\u2024\u2024/secret.txt",      # one dot leaders
    "\u2025/secret.txt",            # two dot leader
    ".. /secret.txt", "..\u200b/secret.txt", "... /secret.txt", "..../secret.txt",
    "...", "drafts/..\u00a0/x", "drafts/.\u0338./x", "\u002e\u0307\u002e/x",
    "drafts\u2215..\u2215..\u2215secret.txt",  # division slashes are not separators
    "drafts\uff0f..\uff0fsecret.txt",           # nor are fullwidth solidi
    "x.", "x ", "x. . .", "CON", "nul.txt", "a:b", "drafts/file::$DATA",
])
async def test_encoded_and_look_alike_traversals_are_plain_names_inside_the_folder(
        layout: tuple[Path, Path], path: str) -> None:
    root, outside = layout
    before = _everything_under(outside)
    with contextlib.suppress(ArgumentError, ToolError):
        await _run(_tool(root, "write_draft"), path=path, text="pwned")
    assert _everything_under(outside) == before
    assert (outside / "secret.txt").read_text() == "TOP SECRET"
    with contextlib.suppress(ArgumentError, ToolError):
        assert await _run(_tool(root, "read_file"), path=path) != "TOP SECRET"
    for written in root.rglob("*"):
        assert written.resolve().is_relative_to(root.resolve())


@pytest.mark.anyio
async def test_unicode_normalisation_forms_name_distinct_files_inside_the_folder(
        layout: tuple[Path, Path]) -> None:
    root, _ = layout
    nfc, nfd = unicodedata.normalize("NFC", "café.md"), unicodedata.normalize("NFD", "café.md")
    await _run(_tool(root, "write_draft"), path=f"drafts/{nfc}", text="one")
    await _run(_tool(root, "write_draft"), path=f"drafts/{nfd}", text="two")
    assert await _run(_tool(root, "read_file"), path=f"drafts/{nfc}") == "one"
    assert all(p.resolve().is_relative_to(root.resolve()) for p in root.rglob("*"))


@pytest.mark.parametrize("path", [
    "a" * 1025, "drafts/" + "b" * 256, "/".join(["c"] * 600),
])
def test_paths_past_the_length_limits_are_refused_at_validation(
        layout: tuple[Path, Path], path: str) -> None:
    root, _ = layout
    with pytest.raises(ArgumentError, match="longer than"):
        _tool(root, "write_draft").validate({"path": path, "text": "x"})


@pytest.mark.anyio
async def test_a_name_too_long_for_the_file_system_is_a_clear_error(
        layout: tuple[Path, Path]) -> None:
    root, _ = layout
    with pytest.raises(ToolError):
        await _run(_tool(root, "write_draft"), path="drafts/" + "é" * 255, text="x")


@pytest.mark.anyio
async def test_a_deep_path_within_the_limit_stays_inside(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    deep = "/".join(["d"] * 400) + "/x.md"
    await _run(_tool(root, "write_draft"), path=deep, text="deep")
    assert (root / deep).read_text() == "deep"


@pytest.mark.anyio
async def test_a_hard_link_to_a_file_outside_is_not_read(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    os.link(outside / "secret.txt", root / "drafts" / "innocent.md")
    with pytest.raises(ToolError, match="hard link"):
        await _run(_tool(root, "read_file"), path="drafts/innocent.md")


@pytest.mark.anyio
async def test_hard_links_can_be_allowed_by_the_operator(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    os.link(outside / "secret.txt", root / "drafts" / "shared.md")
    assert await _run(_tool(root, "read_file", allow_hard_links=True),
                      path="drafts/shared.md") == "TOP SECRET"


@pytest.mark.anyio
async def test_writing_or_deleting_a_hard_link_never_changes_the_file_outside(
        layout: tuple[Path, Path]) -> None:
    root, outside = layout
    os.link(outside / "secret.txt", root / "drafts" / "innocent.md")
    await _run(_tool(root, "write_draft"), path="drafts/innocent.md", text="pwned")
    assert (outside / "secret.txt").read_text() == "TOP SECRET"
    os.link(outside / "secret.txt", root / "drafts" / "other.md")
    await _run(_tool(root, "delete_file"), path="drafts/other.md")
    assert (outside / "secret.txt").read_text() == "TOP SECRET"


@pytest.mark.anyio
async def test_a_folder_swapped_back_and_forth_with_a_symlink_never_lets_a_write_out(
        layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (root / "link").symlink_to(outside, target_is_directory=True)
    stop = threading.Event()

    def swapper() -> None:
        steps = [("drafts", "real"), ("link", "drafts"), ("drafts", "link"), ("real", "drafts")]
        while not stop.is_set():
            for source, target in steps:
                # a write may create "drafts" in a gap: then a step fails; go on
                with contextlib.suppress(OSError):
                    os.rename(root / source, root / target)

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    write, read = _tool(root, "write_draft"), _tool(root, "read_file")
    seen: list[str] = []
    try:
        for i in range(200):
            for t, arguments in ((write, {"path": f"drafts/pwn{i}.txt", "text": "pwned"}),
                                 (read, {"path": "drafts/secret.txt"})):
                with contextlib.suppress(ToolError):
                    seen.append(str(await _run(t, **arguments)))
    finally:
        stop.set()
        thread.join()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert "TOP SECRET" not in seen


@pytest.mark.anyio
async def test_a_path_outside_is_stopped_before_a_person_is_asked(
        hostile: Any, layout: tuple[Path, Path]) -> None:
    root, outside = layout
    outcome = await hostile(files(root), [
        call("write_draft", {"path": "drafts/../../outside/secret.txt", "text": "pwned"}),
        call("delete_file", {"path": "../outside/secret.txt"}),
        call("read_file", {"path": "/proc/self/environ"}),
    ])
    assert [r.error_kind for r in outcome.results] == ["invalid_arguments"] * 3
    assert outcome.asked == []
    assert (outside / "secret.txt").read_text() == "TOP SECRET"
