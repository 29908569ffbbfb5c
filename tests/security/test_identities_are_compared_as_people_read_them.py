"""Identities: an attacker who read the two-person rule votes twice under spellings of one
name (case, full width, compatibility forms, composed or not), approves a call proposed for
themselves under another spelling, passes for someone else with a look-alike name (mixed
scripts, invisible characters), or has their own assistant (another principal) approve its
calls through the MCP approval queue's CLI."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion import _answers as answers
from anfitrion._approvals import ApprovalRequest, Quorum, Reviewer
from anfitrion._cli.main import cli
from anfitrion._identity import identity_key, identity_problem
from anfitrion.store import MemoryStore

pytestmark = pytest.mark.anyio


def _request(principal: str = "agent") -> ApprovalRequest:
    return ApprovalRequest.for_call(session_id="s1", principal_id=principal, call_id="c1",
                                    tool_name="pay", tool_definition_hash="h" * 64,
                                    arguments={"to": "ana"}, effect="write",
                                    reason="a person decides", rule_id="r",
                                    quorum=Quorum(2, ("finance",)))


async def _vote(store: MemoryStore, request: ApprovalRequest, name: str) -> answers.Outcome:
    return await answers.answer(store, request.id, request.digest, approved=True,
                                approver=name, via="api",
                                reviewer=Reviewer(name, frozenset({"finance"})))


def _spellings(name: str) -> list[str]:
    full = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in name)
    return [name.upper(), name.title(), full, full.upper(), unicodedata.normalize("NFD", name),
            name.swapcase(), f" {name} ", f"{name.upper()}  "]


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["alice", "bob", "zoë", "maría", "straße"]),
       pick=st.integers(0, 7))
def test_one_person_under_two_spellings_votes_once(name: str, pick: int) -> None:
    async def run() -> None:
        store = MemoryStore()
        request = _request()
        await store.create_approval(request)
        first = await _vote(store, request, name)
        assert first.vote is not None and first.answer is None
        again = await _vote(store, request, _spellings(name)[pick])
        assert again.refusal is answers.Refusal.ALREADY_VOTED
        found = await store.get_approval(request.id)
        assert found is not None and found.answer is None

    anyio.run(run)


@pytest.mark.parametrize("reviewer", ["AGENT", "Agent", "ａｇｅｎｔ", "ＡＧＥＮＴ", "agent"])
async def test_the_requester_under_another_spelling_cannot_vote(reviewer: str) -> None:
    store = MemoryStore()
    request = _request("agent")
    await store.create_approval(request)
    outcome = await _vote(store, request, reviewer)
    assert outcome.refusal is answers.Refusal.SELF_APPROVAL
    assert not await store.list_approval_votes(request.id)


@pytest.mark.parametrize("name", [
    "\u0430lice",  # Cyrillic а + Latin lice
    "b\u043eb",  # Cyrillic о
    "ali\u200bce",  # zero-width space
    "alice\u200d",  # zero-width joiner
    "\u202ealice",  # right-to-left override
    "ali\u00adce",  # soft hyphen
    "al\u0456ce",  # Cyrillic і
    "\u03bfscar",  # Greek ο + Latin
    "alice\u2060",  # word joiner
    "\u3000",  # ideographic space only
    "",
])
async def test_names_a_person_could_misread_cannot_vote(name: str) -> None:
    assert identity_problem(name) is not None
    store = MemoryStore()
    request = _request()
    await store.create_approval(request)
    outcome = await _vote(store, request, name)
    assert outcome.refusal is answers.Refusal.INVALID and "ambiguous" in outcome.detail
    assert not await store.list_approval_votes(request.id)


@pytest.mark.parametrize("name", ["alice", "Zoë", "maría-josé", "李雷", "たなか太郎", "Иван",
                                  "o'brien", "ops.bot_2", "Ανδρέας"])
def test_ordinary_names_in_one_script_are_not_ambiguous(name: str) -> None:
    assert identity_problem(name) is None
    assert identity_key(name) == identity_key(name.upper())


async def test_the_queue_refuses_principals_the_reviewer_acts_for_under_any_spelling() -> None:
    pytest.importorskip("mcp")
    from anfitrion.mcp._approval_queue import approval_queue

    store = MemoryStore()
    request = _request("Assistant-Of-Alice")
    await store.create_approval(request)
    server = approval_queue(store, Reviewer("alice", frozenset({"finance"})),
                            principals=["assistant-of-alice"])
    listed = await server.call_tool("list_pending", {})
    assert [p["answerable"] for p in listed.structured_content["pending"]] == [False]
    for tool in ("approve", "deny"):
        with pytest.raises(Exception, match="proposed it"):
            await server.call_tool(tool, {"request_id": request.id, "digest": request.digest})
    assert not await store.list_approval_votes(request.id)
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is None


def test_the_queue_cli_refuses_an_ambiguous_not_for_name(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from anfitrion.channels._reviewers import token_sha256

    reviewers = tmp_path / "reviewers.toml"
    reviewers.write_text('[reviewers.alice]\nroles = ["finance"]\n'
                         f'token_sha256 = "{token_sha256("alice-own-token-0123456789")}"\n')
    env = {"ANFITRION_REVIEWER_TOKEN": "alice-own-token-0123456789"}
    result = CliRunner().invoke(cli, ["approvals", "mcp", "--store", "memory://",
                                      "--reviewers", str(reviewers), "--not-for",
                                      "\u0430ssistant"], env=env)
    assert result.exit_code != 0
    assert "ambiguous" in result.output and "Traceback" not in result.output


