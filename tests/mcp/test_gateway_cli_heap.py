"""``anfitrion gateway`` settles its heap once it serves: what it built to start is collected,
then frozen out of the cyclic collector's reach, and young collections run less often —
while everything made afterwards is still collected (docs/performance.md, issue 31)."""

from __future__ import annotations

import gc
import json
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
from click.testing import CliRunner
from gateway_helpers import PROTOCOL

from anfitrion._cli import gateway as gateway_cli
from anfitrion._cli.main import cli
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers, McpToolset


class Node:
    """An object that can be part of a reference cycle and be watched with a weak reference."""

    def __init__(self) -> None:
        self.other: Any = None


def garbage_cycle() -> weakref.ref[Node]:
    """Two nodes that refer to each other and to nothing else: only the collector frees them."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def gc_restored() -> Iterator[None]:
    """The test process's collector as it was: not frozen, its thresholds unchanged."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_the_startup_heap_is_collected_before_it_is_frozen(gc_restored: None) -> None:
    gc.unfreeze()
    dead = garbage_cycle()  # garbage already when serving starts: frozen, it would never go
    gc.disable()  # no collection of the test's own between the cycle and the settling
    try:
        assert dead() is not None
        gateway_cli.settle_heap()
    finally:
        gc.enable()
    assert dead() is None
    assert gc.get_freeze_count() > 0  # the rest of the process: out of every collection


def test_after_settling_young_collections_are_rarer_and_new_cycles_are_still_freed(
        gc_restored: None) -> None:
    gc.set_threshold(700, 10, 10)
    gateway_cli.settle_heap()
    assert gc.get_threshold() == (gateway_cli.YOUNG_COLLECTION_EVERY, 10, 10)
    made_while_serving = garbage_cycle()
    gc.collect()
    assert made_while_serving() is None


def test_a_higher_threshold_set_by_the_operator_is_kept(gc_restored: None) -> None:
    gc.set_threshold(50_000, 20, 20)
    gateway_cli.settle_heap()
    assert gc.get_threshold() == (50_000, 20, 20)


@pytest.mark.mcp_servers
def test_the_gateway_settles_its_heap_after_its_servers_start_and_before_it_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gc_restored: None) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"proto": {
        "command": sys.executable, "args": [PROTOCOL], "trusted": True}}}))
    steps: list[str] = []
    start = McpServers.start

    async def started(self: Any) -> None:
        await start(self)
        steps.append("servers started")

    async def serve(self: Gateway, **_: Any) -> None:
        steps.append(f"served, frozen: {gc.get_freeze_count() > 0}")

    ensure = McpToolset._ensure

    async def connect(self: McpToolset) -> Any:
        steps.append("connecting")
        return await ensure(self)

    monkeypatch.setattr(McpServers, "start", started)
    monkeypatch.setattr(McpToolset, "_ensure", connect)
    monkeypatch.setattr(Gateway, "serve_stdio", serve)
    monkeypatch.setattr(gateway_cli, "settle_heap",
                        lambda: (steps.append("settled"), gc.freeze()))
    gc.unfreeze()
    outcome = CliRunner().invoke(cli, ["gateway", "--config", str(config), "--store",
                                       f"sqlite:///{tmp_path / 'anfitrion.db'}"])
    assert outcome.exit_code == 0, outcome.output
    # a connection is made after the freeze (start only schedules it): never kept frozen
    assert [s for s in steps if s != "connecting"] == [
        "servers started", "settled", "served, frozen: True"]
    assert "connecting" not in steps[:steps.index("settled")]
