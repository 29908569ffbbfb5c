"""A host process for the crash tests: it can stop dead at any ledger state.

    python crash_worker.py STORE_URL EFFECTS_FILE run
    python crash_worker.py STORE_URL EFFECTS_FILE run-approving - STOP_AT
    python crash_worker.py STORE_URL EFFECTS_FILE resume SESSION STOP_AT
    python crash_worker.py STORE_URL EFFECTS_FILE ready - STOP_AT
    python crash_worker.py STORE_URL EFFECTS_FILE again SESSION
    python crash_worker.py STORE_URL EFFECTS_FILE race CALL_ID

``again`` is the model proposing the same send in another session of the same principal (a
new call id): the effect key (``send:{to}``, scope principal) is the same, and a person
declines any request warning that it already ran. ``race`` reserves
the send's effect key for CALL_ID once its standard input says ``go`` and sends if it got it,
printing ``RACE <claim state>``: two of them started together race for one key.

With ``CRASH_APPROVER=yes`` (or ``no``) every mode has an in-process person answer (see
:func:`in_process_person`). With ``CRASH_RECONCILE=1`` in the environment the send declares a
reconcile hook that asks the effects file (the outside system) whether the send happened.

``run`` suspends on the approval; ``run-approving`` has a person approve at once, so the
whole ledger is walked in the first run; ``ready`` resumes what ``resume --ready`` would.

At STOP_AT (requested, deciding, suspending, approved, claimed, executed, settled, or none) it
prints ``AT <state>`` and waits for its standard input forever, so the test can SIGKILL it exactly
there. ``requested`` is right after the approval request is stored; ``suspending`` right
before the session is saved as suspended. A resume that finds the session leased by a live
process prints ``CONFLICT`` and exits 3.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

from anfitrion import Effect, Host, Toolbox
from anfitrion._approvals import Approver, CallbackApprover, DeferredApprover
from anfitrion._conversation import ToolResult, UserMessage
from anfitrion._effects import effect_key
from anfitrion._runtime import reap_dead_leases
from anfitrion.exceptions import ConflictError
from anfitrion.models._base import ModelRequest
from anfitrion.store import ClaimState, open_store
from anfitrion.testing import ScriptedModel, call

STORE_URL, EFFECTS, MODE = sys.argv[1:4]
SESSION_ID = "crash-session"
STOP_AT = sys.argv[5] if len(sys.argv) > 5 else "none"


def stop_here(state: str) -> None:
    if state == STOP_AT:
        print(f"AT {state}", flush=True)
        sys.stdin.read()  # the test kills us here
        raise SystemExit("stdin closed before the kill")


class StoppingStore:
    """The real store, with a stop right after the ledger reaches a state."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def create_approval(self, request: Any) -> None:
        await self._store.create_approval(request)
        stop_here("requested")

    async def save_session(self, state: Any) -> Any:
        if state.status == "suspended":
            stop_here("suspending")
        return await self._store.save_session(state)

    async def consume_approval(self, request_id: str, digest: str) -> Any:
        answer = await self._store.consume_approval(request_id, digest)
        stop_here("approved")
        return answer

    async def claim_execution(self, session_id: str, call_id: str, digest: str,
                              **kwargs: Any) -> Any:
        claim = await self._store.claim_execution(session_id, call_id, digest, **kwargs)
        if claim.state is ClaimState.CLAIMED:
            stop_here("claimed")
        return claim

    async def claim_execution_and_audit(self, session_id: str, call_id: str, digest: str,
                                        **kwargs: Any) -> Any:
        # the claim with the records before the effect, in one transaction (the gate's path)
        claim = await self._store.claim_execution_and_audit(session_id, call_id, digest,
                                                            **kwargs)
        if claim.state is ClaimState.CLAIMED:
            stop_here("claimed")
        return claim

    async def settle_execution(self, session_id: str, call_id: str, result: Any,
                               token: str) -> bool:
        settled: bool = await self._store.settle_execution(session_id, call_id, result, token)
        stop_here("settled")
        return settled


def sent(arguments: dict[str, Any], context: Any) -> bool:
    """The reconcile hook: ask the outside system (the effects file) whether it happened."""
    try:
        with open(EFFECTS, encoding="utf-8") as f:
            return f"sent to {arguments['to']}\n" in f.read()
    except FileNotFoundError:
        return False


def toolbox() -> Toolbox:
    tools = Toolbox()

    # CRASH_RECONCILE=1: the tool declares a reconcile hook asking the effects file
    @tools.tool(effect=Effect.WRITE, provenance="trusted", effect_key="send:{to}",
                effect_scope="principal",
                reconcile=sent if os.environ.get("CRASH_RECONCILE") == "1" else None)
    def send(to: str) -> str:
        """Send a message (the side effect: a line in the effects file)."""
        record_send(to)
        stop_here("executed")
        return f"sent to {to}"

    return tools


def respond(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if isinstance(last, UserMessage) and any(isinstance(p, ToolResult) for p in last.parts):
        return " | ".join(p.content for p in last.parts if isinstance(p, ToolResult))
    return call("send", {"to": "ana"}, id="w1")


def in_process_person(request: Any) -> bool:
    """``CRASH_APPROVER=yes|no``: a person answering in this process (a terminal, a
    callback), who notes each question in ``EFFECTS.asked`` and can be killed mid-thought
    (STOP_AT ``deciding``)."""
    with open(f"{EFFECTS}.asked", "a", encoding="utf-8") as f:
        f.write(f"{request.id}\n")
    stop_here("deciding")
    return os.environ["CRASH_APPROVER"] == "yes"


def record_send(to: str) -> None:
    with open(EFFECTS, "a", encoding="utf-8") as f:
        f.write(f"sent to {to}\n")
        f.flush()
        os.fsync(f.fileno())


async def race(call_id: str) -> None:
    store = open_store(STORE_URL)
    try:
        key = effect_key(tool="send", arguments={"to": "ana"}, principal_id="alice",
                         session_id=f"race-{call_id}", template="send:{to}", scope="principal")
        await store.list_effects()  # connected (and migrated) before the start line
        print("READY", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("no start line")
        claim = await store.claim_execution(f"race-{call_id}", call_id, "d", effect=key)
        if claim.state is ClaimState.CLAIMED and claim.token is not None:
            record_send("ana")
            await store.settle_execution(f"race-{call_id}", call_id,
                                         ToolResult(call_id, "send", "sent to ana"), claim.token)
        print(f"RACE {claim.state.value}", flush=True)
    finally:
        await store.close()


async def main() -> None:
    if MODE == "race":
        await race(sys.argv[4])
        return
    store = StoppingStore(open_store(STORE_URL))
    approver: Approver = DeferredApprover()
    if os.environ.get("CRASH_APPROVER") in ("yes", "no"):
        approver = CallbackApprover(in_process_person, name="bob")
    elif MODE == "run-approving":
        approver = CallbackApprover(lambda request: True, name="bob")
    elif MODE == "again":  # a person who approves a send, but not one told it already ran
        approver = CallbackApprover(lambda request: not request.warnings, name="bob")
    host = Host(model=ScriptedModel(respond), tools=toolbox(), store=store,  # type: ignore[arg-type]
                approver=approver)
    try:
        if MODE == "again":
            run = await host.run("send it again", principal="alice", session_id=sys.argv[4])
        elif MODE.startswith("run"):
            print(f"SESSION {SESSION_ID}", flush=True)
            run = await host.run("send it", principal="alice", session_id=SESSION_ID)
        elif MODE == "ready":
            await reap_dead_leases(store)  # type: ignore[arg-type]
            owner = f"ready-{os.getpid()}"
            taken = await store.claim_resumable(owner)
            if taken is None:
                print(json.dumps({"status": "nothing ready"}), flush=True)
                return
            run = await host.resume(taken.session_id, force=True, lease_from=owner)
        else:
            try:
                run = await host.resume(sys.argv[4], force=True)
            except ConflictError:
                print("CONFLICT", flush=True)
                raise SystemExit(3) from None
    finally:
        await store.close()
    print(json.dumps({"session_id": run.session_id, "status": run.status.value,
                      "output": run.output}), flush=True)


anyio.run(main)
