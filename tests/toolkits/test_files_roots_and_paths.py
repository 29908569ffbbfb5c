"""The files toolkit's root is fixed when it is made, and paths inside it are accepted exactly
when they provably stay inside: the test vectors of the MCP filesystem server
(``modelcontextprotocol/servers``, ``src/filesystem/__tests__/path-validation.test.ts``) and of
gemini-cli (``packages/core/src/utils/workspaceContext.test.ts``), turned into tables."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion import Principal, ToolContext, ToolDefinitionError
from anfitrion._tools import Tool, Toolbox
from anfitrion.exceptions import ArgumentError, ToolError
from anfitrion.toolkits import files
from anfitrion.toolkits._files import check_relative_path


def _tool(box: Toolbox, name: str) -> Tool:
    found = box.get(name)
    assert found is not None
    return found


async def _run(box: Toolbox, name: str, **arguments: Any) -> Any:
    t = _tool(box, name)
    return await t.handler(t.validate(arguments), ToolContext(Principal("a"), "s", "c", t.name))


# -- the root ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_symlinked_root_re_pointed_afterwards_still_serves_the_first_folder(
        tmp_path: Path) -> None:
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "note.md").write_text("first")
    (tmp_path / "second").mkdir()
    (tmp_path / "second" / "note.md").write_text("SECRET")
    (tmp_path / "root").symlink_to(tmp_path / "first", target_is_directory=True)
    box = files(tmp_path / "root")
    (tmp_path / "root").unlink()
    (tmp_path / "root").symlink_to(tmp_path / "second", target_is_directory=True)
    assert await _run(box, "read_file", path="note.md") == "first"
    await _run(box, "write_draft", path="new.md", text="x")
    assert (tmp_path / "first" / "new.md").exists()
    assert sorted(p.name for p in (tmp_path / "second").iterdir()) == ["note.md"]


@pytest.mark.anyio
async def test_a_relative_root_does_not_follow_a_later_chdir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, text in (("a", "from a"), ("b", "SECRET")):
        (tmp_path / name / "work").mkdir(parents=True)
        (tmp_path / name / "work" / "note.md").write_text(text)
    monkeypatch.chdir(tmp_path / "a")
    box = files("work")
    monkeypatch.chdir(tmp_path / "b")
    assert await _run(box, "read_file", path="note.md") == "from a"
    listing = await _run(box, "list_files", path=".")
    assert [e["name"] for e in listing["entries"]] == ["note.md"]


@pytest.mark.parametrize("root", ["", b"", "\x00"])
def test_an_empty_root_is_refused_rather_than_meaning_the_working_directory(root: Any) -> None:
    with pytest.raises(ToolDefinitionError, match=r"empty|NUL"):
        files(root)


def test_a_root_that_is_a_file_or_missing_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for root in (tmp_path / "file", tmp_path / "missing"):
        with pytest.raises(ToolDefinitionError, match="not an existing folder"):
            files(root)


# -- the MCP filesystem server's path-validation vectors, with R the root, P its parent ---------

INSIDE = [
    "{R}", "{R}/", "{R}//", "{R}///", "{R}/src", "{R}/src/index.js", "{R}/deeply/nested/file.txt",
    "{R}/./src", "{P}/./project/src", "{R}//src//file", "{R}/..test", "{R}/test..", "{R}/te..st",
    "{R}/.", "{R}/...", "{R}/....", "{R}/report_50%.pdf", "{R}/Q1_25%_growth", "{R}/%41",
    "{R}/%2e%2e", "{R}/file%20name", "{R}/my project (v2)/file", "relative/path", "./file",
    "{R}/src/../lib/x.js", "a/../b", "{R}/" + "a/" * 300 + "file.txt",
]
OUTSIDE = [
    ("{R}2", "absolute"), ("{R}_backup", "absolute"), ("{R}-old", "absolute"),
    ("{R}ile", "absolute"), ("{R}.bak", "absolute"), ("{P}/other", "absolute"),
    ("/etc/passwd", "absolute"), ("{P}", "absolute"), ("/", "absolute"),
    ("{P}//project2", "absolute"), ("{R}/../../../etc/passwd", "absolute"),
    ("{R}/../../other", "absolute"), ("{R}/../project2", "absolute"),
    ("{R}/src/../../project2", "absolute"), ("{R}/./../../other", "absolute"),
    ("{R}/../project/../../../etc", "absolute"), ("{R}/../test", "absolute"),
    ("{R}/..", "absolute"), ("../parent", "'..'"), ("a/../../x", "'..'"),
    ("a/" * 100 + "../" * 101 + "etc/passwd", "'..'"),
    ("{R}\x00/etc/passwd", "NUL"), ("{R}/test\x00.txt", "NUL"), ("\x00{R}", "NUL"),
    ("{R}/\x00", "NUL"), ("", "folder itself"),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "home" / "user" / "project"
    root.mkdir(parents=True)
    for neighbour in ("project2", "project_backup", "other"):
        (tmp_path / "home" / "user" / neighbour).mkdir()
        (tmp_path / "home" / "user" / neighbour / "secret.txt").write_text("SECRET")
    return root


def _fill(template: str, root: Path) -> str:
    return template.replace("{R}", str(root)).replace("{P}", str(root.parent))


@pytest.mark.anyio
@pytest.mark.parametrize("template", INSIDE)
async def test_paths_that_stay_inside_the_root_are_accepted(project: Path, template: str) -> None:
    path = _fill(template, project)
    box = files(project)
    folder_like = template in ("{R}", "{R}/", "{R}//", "{R}///", "{R}/.")
    if folder_like:
        assert (await _run(box, "list_files", path=path))["folder"] == "."
        return
    await _run(box, "write_draft", path=path, text="here")
    assert await _run(box, "read_file", path=path) == "here"
    assert all(p.resolve().is_relative_to(project.resolve()) for p in project.rglob("*"))


@pytest.mark.parametrize(("template", "why"), OUTSIDE)
@pytest.mark.parametrize("name", ["read_file", "write_draft", "delete_file", "list_files"])
def test_paths_that_leave_the_root_are_refused_at_validation(
        project: Path, template: str, why: str, name: str) -> None:
    if name == "list_files" and why == "folder itself":
        return  # listing the folder itself is what list_files is for
    arguments: dict[str, Any] = {"path": _fill(template, project)}
    if name == "write_draft":
        arguments["text"] = "x"
    with pytest.raises(ArgumentError, match=why):
        _tool(files(project), name).validate(arguments)


@pytest.mark.anyio
async def test_a_root_named_through_a_link_accepts_both_spellings(tmp_path: Path) -> None:
    """MCP filesystem issue 3253 (``/tmp`` → ``/private/tmp`` on macOS)."""
    actual = tmp_path / "actual-target"
    actual.mkdir()
    (actual / "file.txt").write_text("FILE_CONTENT")
    (tmp_path / "symlink-dir").symlink_to(actual, target_is_directory=True)
    box = files(tmp_path / "symlink-dir")
    for spelling in (tmp_path / "symlink-dir" / "file.txt", actual / "file.txt"):
        assert await _run(box, "read_file", path=str(spelling)) == "FILE_CONTENT"


# -- symbolic links inside the root: gemini-cli's and the MCP server's vectors --------------------


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """A root with links that stay inside and links that leave it."""
    root = tmp_path / "project"
    (root / "real-dir").mkdir(parents=True)
    (root / "real-dir" / "file.txt").write_text("inside")
    (root / "drafts").mkdir()
    (root / "drafts" / "note.md").write_text("note")
    outside = tmp_path / "real-outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET")
    (tmp_path / "real-file.txt").write_text("SECRET")
    links = {
        "symlink-dir": root / "real-dir",                 # absolute, inside
        "relative-dir": Path("real-dir"),                 # relative, inside
        "chain-1": Path("chain-2"), "chain-2": Path("real-dir/file.txt"),  # a chain inside
        "drafts/back": Path(".."),                        # up, but still inside
        "drafts/sibling": Path("../real-dir"),
        "out-dir": outside,                               # absolute, outside
        "out-relative": Path("../real-outside"),          # '..' above the root
        "out-file": tmp_path / "real-file.txt",
        "dangling-out": tmp_path / "no-such-file.txt",
        "up": Path(".."),
        "link-a": root / "link-b", "link-b": root / "link-a",  # a loop
        "proc": Path("/proc/self/environ"),
        "empty-out": Path("../project2/x"),
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    return root


LINKED_INSIDE = [
    ("read_file", "symlink-dir/file.txt", "inside"),
    ("read_file", "relative-dir/file.txt", "inside"),
    ("read_file", "chain-1", "inside"),
    ("read_file", "drafts/back/real-dir/file.txt", "inside"),
    ("read_file", "drafts/back/drafts/note.md", "note"),
    ("read_file", "drafts/sibling/file.txt", "inside"),
    ("read_file", "{R}/symlink-dir/file.txt", "inside"),
    ("write_draft", "symlink-dir/does-not-exist.txt", "real-dir/does-not-exist.txt"),
    ("write_draft", "symlink-dir/deep/does-not-exist.txt", "real-dir/deep/does-not-exist.txt"),
    ("write_draft", "drafts/back/top.md", "top.md"),
    ("list_files", "symlink-dir", "file.txt"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "path", "expected"), LINKED_INSIDE)
async def test_links_that_stay_inside_the_root_are_followed(
        linked: Path, name: str, path: str, expected: str) -> None:
    box = files(linked)
    arguments: dict[str, Any] = {"path": _fill(path, linked)}
    if name == "write_draft":
        arguments["text"] = "written"
    result = await _run(box, name, **arguments)
    if name == "read_file":
        assert result == expected
    elif name == "write_draft":
        assert (linked / expected).read_text() == "written"
        assert not (linked / expected).is_symlink()
    else:
        assert expected in [e["name"] for e in result["entries"]]


LINKED_OUTSIDE = [
    ("list_files", "out-dir", "outside the folder"),
    ("read_file", "out-dir/secret.txt", "outside the folder"),
    ("write_draft", "out-dir/does-not-exist.txt", "outside the folder"),
    ("write_draft", "out-dir/deep/does-not-exist.txt", "outside the folder"),
    ("read_file", "out-relative/secret.txt", "outside the folder"),
    ("write_draft", "out-relative/x.txt", "outside the folder"),
    ("read_file", "out-file", "outside the folder"),
    ("read_file", "dangling-out", "outside the folder"),
    ("write_draft", "dangling-out", "not a regular file"),
    ("list_files", "up", "outside the folder"),
    ("read_file", "up/real-outside/secret.txt", "outside the folder"),
    ("read_file", "link-a", "more than 40 links"),
    ("list_files", "link-b", "more than 40 links"),
    ("read_file", "proc", "outside the folder"),
    ("read_file", "empty-out", "outside the folder"),
    ("write_draft", "symlink-dir", "not a regular file"),   # the last name is never followed
    ("delete_file", "symlink-dir", "link, not a regular file"),
    ("delete_file", "out-file", "link, not a regular file"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "path", "why"), LINKED_OUTSIDE)
async def test_links_that_leave_the_root_are_refused_and_change_nothing(
        linked: Path, name: str, path: str, why: str) -> None:
    outside = linked.parent / "real-outside"
    arguments: dict[str, Any] = {"path": path}
    if name == "write_draft":
        arguments["text"] = "pwned"
    with pytest.raises(ToolError, match=why):
        await _run(files(linked), name, **arguments)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (linked.parent / "real-file.txt").read_text() == "SECRET"
    assert not (linked.parent / "no-such-file.txt").exists()


@pytest.mark.anyio
async def test_a_link_re_pointed_outside_after_validation_is_judged_when_it_is_met(
        linked: Path) -> None:
    box = files(linked)
    write = _tool(box, "write_draft")
    arguments = write.validate({"path": "symlink-dir/new.txt", "text": "pwned"})
    (linked / "symlink-dir").unlink()
    (linked / "symlink-dir").symlink_to(linked.parent / "real-outside")
    with pytest.raises(ToolError, match="outside the folder"):
        await write.handler(arguments, ToolContext(Principal("a"), "s", "c", write.name))
    assert sorted(p.name for p in (linked.parent / "real-outside").iterdir()) == ["secret.txt"]


@pytest.mark.anyio
async def test_a_link_flipped_between_inside_and_outside_never_lets_a_write_or_read_out(
        linked: Path) -> None:
    """The link is replaced atomically, as fast as it can be, while the tools use it."""
    import contextlib
    import threading

    outside = linked.parent / "real-outside"
    stop = threading.Event()

    def flipper() -> None:
        targets = [linked / "real-dir", outside]
        i = 0
        while not stop.is_set():
            temp = linked / f".flip{i % 2}"
            with contextlib.suppress(OSError):
                temp.symlink_to(targets[i % 2])
                os.replace(temp, linked / "flip")
            i += 1

    (linked / "flip").symlink_to(linked / "real-dir")
    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()
    box = files(linked)
    seen: list[str] = []
    try:
        for i in range(200):
            with contextlib.suppress(ToolError):
                await _run(box, "write_draft", path=f"flip/pwn{i}.txt", text="pwned")
            with contextlib.suppress(ToolError):
                seen.append(await _run(box, "read_file", path="flip/secret.txt"))
    finally:
        stop.set()
        thread.join()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert "SECRET" not in seen


_PIECES = st.sampled_from(["a", "b", ".", "..", "", "/", "proj", "proj2", "w", "...", "a.b"])


@given(st.lists(_PIECES, max_size=14).map("".join), st.booleans())
def test_an_accepted_path_names_what_normpath_names_and_it_is_inside(path: str,
                                                                     absolute: bool) -> None:
    """The lexical rule agrees with POSIX ``normpath``: a path is accepted exactly when it
    stays at or below the root all along, and then it names what ``normpath`` names."""
    root = "/w/proj"
    path = f"/{path}" if absolute else path
    expected = posixpath.normpath(posixpath.join(root, path))
    # a relative path must not climb above the root on the way ('../proj/x' is refused even
    # though it comes back); an absolute one is normalised first, as the MCP server does
    steps = path.split("/") if not path.startswith("/") else \
        posixpath.relpath(expected, root).split("/")
    depth, climbs = 0, False
    for part in steps:
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        climbs = climbs or depth < 0
    try:
        parts = check_relative_path(path, allow_root=True, roots=[root])
    except ArgumentError:
        assert climbs, path
        return
    assert not climbs, path
    assert posixpath.normpath(posixpath.join(root, *parts)) == expected
