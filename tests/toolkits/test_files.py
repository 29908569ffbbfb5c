from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion import Principal, Provenance, ToolContext
from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolError
from anfitrion.toolkits import files
from anfitrion.toolkits._files import check_relative_path


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """``proj`` (the root) beside ``proj2`` holding a secret, the prefix-confusion neighbour."""
    root = tmp_path / "proj"
    (root / "drafts").mkdir(parents=True)
    (root / "drafts" / "note.md").write_text("hello")
    secret = tmp_path / "proj2"
    secret.mkdir()
    (secret / "secret.txt").write_text("TOP SECRET")
    return root, secret


def tool(box: Any, name: str) -> Tool:
    found = box.get(name)
    assert found is not None
    return found


async def call(t: Tool, arguments: dict[str, Any]) -> Any:
    converted = t.validate(arguments)
    context = ToolContext(Principal("alice"), "s1", "c1", t.name)
    return await t.handler(converted, context)


ATTACKS = [
    ("../proj2/secret.txt", "'..'"),
    ("drafts/../../proj2/secret.txt", "'..'"),
    ("/etc/passwd", "absolute"),
    ("~/.ssh/id_rsa", "'~'"),
    ("~root/.bashrc", "'~'"),
    ("C:\\Windows\\win.ini", "backslash"),
    ("C:/Windows/win.ini", "drive"),
    ("c:secret.txt", "drive"),
    ("\\\\server\\share\\secret.txt", "backslash"),
    ("//server/share/secret.txt", "absolute"),
    ("\\\\?\\C:\\secret.txt", "backslash"),
    ("drafts/note.md\x00.txt", "NUL"),
    ("drafts/\x1b[31mnote.md", "control"),
    ("", "folder itself"),
    (".", "folder itself"),
]


@pytest.mark.parametrize(("path", "why"), ATTACKS)
def test_paths_that_leave_the_folder_are_refused_at_validation(path: str, why: str) -> None:
    with pytest.raises(ArgumentError, match=why):
        check_relative_path(path)


@pytest.mark.parametrize(("path", "why"), ATTACKS)
@pytest.mark.parametrize("name", ["read_file", "write_draft", "delete_file"])
def test_every_file_tool_validates_its_path(layout: tuple[Path, Path], name: str, path: str,
                                            why: str) -> None:
    root, _ = layout
    t = tool(files(root), name)
    arguments: dict[str, Any] = {"path": path}
    if name == "write_draft":
        arguments["text"] = "x"
    with pytest.raises(ArgumentError, match=why):
        t.validate(arguments)


def test_plain_relative_paths_are_normalised_component_wise() -> None:
    assert check_relative_path("drafts//./note.md") == ("drafts", "note.md")
    assert check_relative_path(".", allow_root=True) == ()
    assert check_relative_path("..foo/bar..") == ("..foo", "bar..")


@pytest.mark.anyio
async def test_write_outside_the_folder_is_stopped_before_any_person_is_asked(
        layout: tuple[Path, Path], gate_run: Any) -> None:
    root, secret = layout
    run = await gate_run(files(root), [("write_draft", {"path": "../proj2/secret.txt",
                                                        "text": "pwned"})])
    assert run.result.is_error
    assert run.result.error_kind == "invalid_arguments"
    assert "'..'" in run.result.content
    assert run.asked == []
    assert (secret / "secret.txt").read_text() == "TOP SECRET"


@pytest.mark.anyio
async def test_write_draft_inside_the_folder_runs_after_approval(
        layout: tuple[Path, Path], gate_run: Any) -> None:
    root, _ = layout
    run = await gate_run(files(root), [("write_draft", {"path": "drafts/weather.md",
                                                        "text": "Lisboa 15 °C"})])
    assert not run.result.is_error, run.result.content
    assert len(run.asked) == 1
    assert run.asked[0].arguments == {"path": "drafts/weather.md", "text": "Lisboa 15 °C"}
    assert (root / "drafts" / "weather.md").read_text() == "Lisboa 15 °C"


@pytest.mark.anyio
async def test_write_draft_denied_by_the_person_writes_nothing(
        layout: tuple[Path, Path], gate_run: Any) -> None:
    root, _ = layout
    run = await gate_run(files(root), [("write_draft", {"path": "drafts/x.md", "text": "x"})],
                         approve=False)
    assert run.result.error_kind == "denied"
    assert not (root / "drafts" / "x.md").exists()


@pytest.mark.anyio
async def test_delete_needs_approval_by_default(layout: tuple[Path, Path],
                                                gate_run: Any) -> None:
    root, _ = layout
    run = await gate_run(files(root), [("delete_file", {"path": "drafts/note.md"})],
                         approve=False)
    assert len(run.asked) == 1
    assert run.result.error_kind == "denied"
    assert (root / "drafts" / "note.md").exists()
    run = await gate_run(files(root), [("delete_file", {"path": "drafts/note.md"})])
    assert not run.result.is_error, run.result.content
    assert not (root / "drafts" / "note.md").exists()


@pytest.mark.anyio
async def test_read_and_list_are_allowed_and_untrusted_by_default(
        layout: tuple[Path, Path], gate_run: Any) -> None:
    root, _ = layout
    run = await gate_run(files(root), [("list_files", {"path": "drafts"}),
                                       ("read_file", {"path": "drafts/note.md"})])
    assert run.asked == []
    listing, read = run.results
    assert '"name": "note.md"' in listing.content
    assert read.content == "hello"
    assert read.provenance is Provenance.UNTRUSTED


def test_a_trusted_root_marks_reads_trusted(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert tool(files(root, trusted=True), "read_file").provenance is Provenance.TRUSTED
    assert tool(files(root), "write_draft").provenance is Provenance.TRUSTED


@pytest.mark.anyio
async def test_a_symlink_to_a_file_outside_is_not_followed(layout: tuple[Path, Path]) -> None:
    root, secret = layout
    (root / "drafts" / "link.txt").symlink_to(secret / "secret.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        await call(tool(files(root), "read_file"), {"path": "drafts/link.txt"})


@pytest.mark.anyio
async def test_a_symlinked_folder_pointing_outside_is_not_followed(
        layout: tuple[Path, Path]) -> None:
    root, secret = layout
    (root / "out").symlink_to(secret, target_is_directory=True)
    box = files(root)
    with pytest.raises(ToolError, match=r"symbolic link|not a folder"):
        await call(tool(box, "read_file"), {"path": "out/secret.txt"})
    with pytest.raises(ToolError, match=r"symbolic link|not a folder"):
        await call(tool(box, "list_files"), {"path": "out"})
    with pytest.raises(ToolError, match=r"symbolic link|not a folder"):
        await call(tool(box, "write_draft"), {"path": "out/secret.txt", "text": "pwned"})
    assert (secret / "secret.txt").read_text() == "TOP SECRET"


@pytest.mark.anyio
async def test_a_folder_swapped_for_a_symlink_after_the_check_is_refused(
        layout: tuple[Path, Path]) -> None:
    """The classic race: checked while ``drafts`` is a folder, used after it became a link."""
    root, secret = layout
    box = files(root)
    write = tool(box, "write_draft")
    arguments = write.validate({"path": "drafts/secret.txt", "text": "pwned"})  # the check
    os.rename(root / "drafts", root / "drafts.old")                              # the swap
    (root / "drafts").symlink_to(secret, target_is_directory=True)
    with pytest.raises(ToolError, match=r"symbolic link|not a folder"):
        await write.handler(arguments, ToolContext(Principal("a"), "s", "c", write.name))
    assert (secret / "secret.txt").read_text() == "TOP SECRET"


@pytest.mark.anyio
async def test_a_file_swapped_for_a_symlink_is_replaced_not_followed_by_write(
        layout: tuple[Path, Path]) -> None:
    root, secret = layout
    (root / "drafts" / "note.md").unlink()
    (root / "drafts" / "note.md").symlink_to(secret / "secret.txt")
    with pytest.raises(ToolError, match="not a regular file"):
        await call(tool(files(root), "write_draft"), {"path": "drafts/note.md", "text": "x"})
    assert (secret / "secret.txt").read_text() == "TOP SECRET"


@pytest.mark.anyio
async def test_delete_of_a_symlink_never_touches_its_target(layout: tuple[Path, Path]) -> None:
    root, secret = layout
    (root / "drafts" / "link").symlink_to(secret / "secret.txt")
    with pytest.raises(ToolError, match="link, not a regular file"):
        await call(tool(files(root), "delete_file"), {"path": "drafts/link"})
    assert (secret / "secret.txt").exists()


@pytest.mark.anyio
async def test_a_fifo_is_refused_without_blocking(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    os.mkfifo(root / "pipe")
    with pytest.raises(ToolError, match="special file"):
        await call(tool(files(root), "read_file"), {"path": "pipe"})
    with pytest.raises(ToolError, match="not a regular file"):
        await call(tool(files(root), "write_draft"), {"path": "pipe", "text": "x"})
    assert stat.S_ISFIFO(os.lstat(root / "pipe").st_mode)


@pytest.mark.anyio
async def test_a_device_is_refused(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    try:
        os.mknod(root / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    with pytest.raises(ToolError, match="special file"):
        await call(tool(files(root), "read_file"), {"path": "null"})


@pytest.mark.anyio
async def test_a_link_into_proc_is_refused(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    (root / "environ").symlink_to("/proc/self/environ")
    with pytest.raises(ToolError, match="symbolic link"):
        await call(tool(files(root), "read_file"), {"path": "environ"})


@pytest.mark.anyio
async def test_files_larger_than_the_cap_are_refused(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    (root / "big.txt").write_text("x" * 101)
    box = files(root, max_file_bytes=100)
    with pytest.raises(ToolError, match="more than the limit of 100"):
        await call(tool(box, "read_file"), {"path": "big.txt"})
    with pytest.raises(ArgumentError, match="more than the limit of 100"):
        tool(box, "write_draft").validate({"path": "big2.txt", "text": "é" * 51})


@pytest.mark.anyio
async def test_listings_are_capped(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    for i in range(12):
        (root / f"f{i:02}.txt").write_text("x")
    result = await call(tool(files(root, max_list_entries=5), "list_files"), {"path": "."})
    assert len(result["entries"]) == 5
    assert "first 5 entries" in result["truncated"]


@pytest.mark.anyio
async def test_listing_shows_links_as_links_without_following(
        layout: tuple[Path, Path]) -> None:
    root, secret = layout
    (root / "out").symlink_to(secret, target_is_directory=True)
    result = await call(tool(files(root), "list_files"), {})
    assert {"name": "out", "kind": "link"} in result["entries"]


@pytest.mark.anyio
async def test_write_draft_is_atomic_and_leaves_no_temporary_file(
        layout: tuple[Path, Path]) -> None:
    root, _ = layout
    write = tool(files(root), "write_draft")
    assert (await call(write, {"path": "drafts/note.md", "text": "new"})).startswith("replaced")
    assert (await call(write, {"path": "a/b/c.md", "text": "deep"})).startswith("created")
    assert (root / "drafts" / "note.md").read_text() == "new"
    assert (root / "a" / "b" / "c.md").read_text() == "deep"
    assert sorted(p.name for p in (root / "drafts").iterdir()) == ["note.md"]


@pytest.mark.anyio
async def test_reading_a_binary_file_says_it_is_not_text(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    (root / "blob.bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ToolError, match="not UTF-8"):
        await call(tool(files(root), "read_file"), {"path": "blob.bin"})


def test_the_root_must_exist(tmp_path: Path) -> None:
    from anfitrion import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match="not an existing folder"):
        files(tmp_path / "missing")


def test_delete_can_be_left_out(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert "delete_file" not in files(root, allow_delete=False)


@given(st.lists(st.sampled_from([*"ab./\\~:\x00C", "..", "%2e"]), max_size=30).map("".join))
def test_any_accepted_path_stays_inside_the_folder_lexically(path: str) -> None:
    try:
        parts = check_relative_path(path, allow_root=True)
    except ArgumentError:
        return
    joined = os.path.normpath(os.path.join("/w/proj", *parts))
    assert joined == "/w/proj" or joined.startswith("/w/proj/")
    assert all(p not in ("", ".", "..") and "\\" not in p and "\x00" not in p for p in parts)


@pytest.mark.anyio
async def test_proc_mounted_under_the_folder_is_refused_as_another_file_system() -> None:
    """``/`` as the root stands in for a folder with ``/proc`` mounted inside it."""
    if os.stat("/").st_dev == os.stat("/proc").st_dev:
        pytest.skip("/proc is not a separate file system here")
    box = files("/")
    with pytest.raises(ToolError, match="another file system"):
        await call(tool(box, "read_file"), {"path": "proc/self/environ"})
    with pytest.raises(ToolError, match="another file system"):
        await call(tool(box, "list_files"), {"path": "proc/self"})


@pytest.mark.anyio
async def test_a_root_inside_proc_still_refuses_links() -> None:
    box = files("/proc/self", one_filesystem=True)
    with pytest.raises(ToolError, match="symbolic link"):
        await call(tool(box, "read_file"), {"path": "cwd/etc/passwd"})
