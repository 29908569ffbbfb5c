"""Effect keys: an attacker who read `anfitrion.effects` re-proposes a side effect with arguments
the tool's own schema reads as the same (another number spelling, a default written out or left
out) to make it run twice. Equal under the schema is one effect; strings are compared as written
(documented in `anfitrion._effect_arguments`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion import DenyAllApprover, Effect, Policy, Tool
from anfitrion._conversation import ToolCall
from anfitrion._effects import effect_key
from anfitrion._gate import Gate, _silent
from anfitrion.policy import Decision
from anfitrion.store import MemoryStore
from anfitrion.testing import gate_session

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "amount": {"type": "integer"},
        "rate": {"type": "number"},
        "currency": {"type": "string", "default": "EUR"},
        "fee": {"type": "number", "default": 0},
        "options": {"$ref": "#/$defs/options"},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
    },
    "required": ["to", "amount"],
    "$defs": {
        "options": {"type": "object", "properties": {
            "express": {"type": "boolean", "default": False},
            "retries": {"type": "integer", "default": 3}}},
        "line": {"type": "object", "properties": {
            "qty": {"type": "integer", "default": 1}, "sku": {"type": "string"}}},
    },
}


def _spellings(n: int) -> list[str]:
    """How a model can write the integer *n* in JSON, all equal under the schema."""
    return [str(n), f"{n}.0", f"{n}e0", f"{n}.000E+0", f"{n * 10}e-1", f"{n}.0e0"]


def _pay(ran: list[dict[str, Any]]) -> Tool:
    return Tool.from_schema("pay", SCHEMA, lambda a: ran.append(a) or "paid",
                            effect=Effect.WRITE, effect_scope="principal")


def _gate() -> Gate:
    allow = Policy([lambda c, ctx: Decision.allow("test", "allow")])
    return Gate(policy=allow, approver=DenyAllApprover(), store=MemoryStore(), emit=_silent)


async def _propose(gate: Gate, tool: Tool, raws: list[str]) -> list[str]:
    kinds = []
    for i, raw in enumerate(raws):  # each a new call id, as a model re-proposing would send
        outcome = await gate.process(ToolCall.from_raw(f"c{i}", "pay", raw), {"pay": tool},
                                     gate_session("alice", f"s{i}", turn=1))
        assert outcome.result is not None
        kinds.append(outcome.result.content)
    return kinds


@settings(max_examples=40, deadline=None)
@given(n=st.integers(min_value=-10**6, max_value=10**6), first=st.integers(0, 5),
       second=st.integers(0, 5))
def test_an_amount_written_another_way_is_the_same_effect(n: int, first: int,
                                                          second: int) -> None:
    ran: list[dict[str, Any]] = []
    spell = _spellings(n)
    raws = [f'{{"to": "ana", "amount": {spell[first]}, "rate": {spell[second]}}}',
            f'{{"to": "ana", "amount": {spell[second]}, "rate": {spell[first]}}}']
    kinds = asyncio.run(_propose(_gate(), _pay(ran), raws))
    assert len(ran) == 1, raws
    assert (kinds[1] or "").startswith("[not run again: this exact effect")


@pytest.mark.parametrize("second", [
    '{"to": "ana", "amount": 5, "currency": "EUR"}',
    '{"to": "ana", "amount": 5, "fee": 0.0}',
    '{"to": "ana", "amount": 5, "fee": 0, "currency": "EUR"}',
    '{"to": "ana", "amount": 5, "options": {}}',
    '{"amount": 5, "options": {"express": false, "retries": 3.0}, "to": "ana"}',
    '{"to": "ana", "amount": 5, "options": {"retries": 30e-1}}',
], ids=["currency", "fee-float", "both", "empty-nested", "nested-all", "nested-exp"])
def test_defaults_written_out_or_left_out_are_the_same_effect(second: str) -> None:
    ran: list[dict[str, Any]] = []
    kinds = asyncio.run(_propose(_gate(), _pay(ran), [
        '{"to": "ana", "amount": 5}' if "options" not in second
        else '{"to": "ana", "amount": 5, "options": {}}', second]))
    assert len(ran) == 1
    assert (kinds[1] or "").startswith("[not run again: this exact effect")


def test_defaults_inside_array_items_count_as_given() -> None:
    ran: list[dict[str, Any]] = []
    kinds = asyncio.run(_propose(_gate(), _pay(ran), [
        '{"to": "ana", "amount": 5, "lines": [{"sku": "a"}, {"sku": "b", "qty": 2}]}',
        '{"to": "ana", "amount": 5, "lines": [{"sku": "a", "qty": 1.0}, {"qty": 2, "sku": "b"}]}',
    ]))
    assert len(ran) == 1
    assert kinds[1].startswith("[not run again: this exact effect")


@pytest.mark.parametrize("second", [
    '{"to": "ana", "amount": 6}',
    '{"to": "ana", "amount": 5, "rate": 5.5}',
    '{"to": "ana", "amount": 5, "currency": "USD"}',
    '{"to": "ana", "amount": 5, "options": {"express": true}}',
    '{"to": "Ana", "amount": 5}',
    '{"to": "ａｎａ", "amount": 5}',
    '{"to": "ana ", "amount": 5}',
], ids=["amount", "rate", "currency", "nested", "case", "fullwidth", "space"])
def test_arguments_that_differ_under_the_schema_are_different_effects(second: str) -> None:
    ran: list[dict[str, Any]] = []
    asyncio.run(_propose(_gate(), _pay(ran), ['{"to": "ana", "amount": 5, "rate": 5}', second]))
    assert len(ran) == 2


def test_templates_read_the_normalised_values_and_keys_of_plain_arguments_are_unchanged(
) -> None:
    tool = {"type": "object", "properties": {"id": {"type": "integer"},
                                             "n": {"type": "integer", "default": 2}}}
    one = effect_key(tool="t", arguments={"id": 7.0}, principal_id="p", session_id="s",
                     template="t:{id}:{n}", schema=tool)
    two = effect_key(tool="t", arguments={"id": 7, "n": 2}, principal_id="p", session_id="s",
                     template="t:{id}:{n}", schema=tool)
    assert one.key == two.key and one.display == "t:7:2"
    assert one.arguments == {"id": 7.0}  # the call's own arguments are what is kept
    # keys stored before normalisation (pinned from the previous release) still match
    # arguments already in normal form: the stored format is unchanged
    plain = {"id": 7, "n": 2}
    assert effect_key(tool="t", arguments=plain, principal_id="p", session_id="s",
                      schema=tool).key == \
        "8ca24bd7ece92befb88a87acbd692a130bfd78f5dccc060ab3a3ae0045539ef4"
    assert effect_key(tool="t", arguments=plain, principal_id="p", session_id="s",
                      template="t:{id}:{n}", schema=tool).key == \
        "b3341bcebc9d874cda8f282815a086c0c303a2020c30b4770b082d87dceaa358"
