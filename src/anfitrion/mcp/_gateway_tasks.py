"""Approvals that complete in-band: a call waiting for a person as a task (the MCP Tasks
extension, ``io.modelcontextprotocol/tasks``, SEP-2663), and the inbox link of the request as
a URL-mode elicitation.

**Tasks.** A 2026-07-28 client that declares the extension (at the connection, or in the
request's ``_meta`` client capabilities) and calls a tool that must wait for a person gets a
``CreateTaskResult`` at once (``resultType: "task"``, flat, ``ttlMs``/``pollIntervalMs``),
whose ``statusMessage`` says who must approve what: the tool, the call's digest, the request
id, the inbox link when ``gateway.inboxUrl`` is configured. ``tasks/get`` answers the task's
state; once a person answered, the ``tasks/get`` that finds it runs the approved call (through
the gate, the ledger, exactly as the "call again" path does: same conversation, same call id,
so at most once) and the task completes with the executed result, inlined under ``result``;
a denial fails it with ``error.message`` ``declined by a person: <note>``. ``tasks/cancel``
withdraws the approval request (audited; approving it is refused afterwards). A re-send of
the same call (same tool, same arguments: the same digest, in the same conversation) returns
the same task.

**Binding.** A task is a store record (``gateway.tasks``) holding the principal (id and OAuth
issuer), the conversation, the tool, the arguments and their digest, the call id and the
approval request. Its id is 32 random bytes: unguessable, never derived from the call. Every
``tasks/*`` request is answered only for the task's own principal — any other gets "no such
task", exactly as for an id that does not exist. The call a task runs is the one stored with
it, checked against its digest and against the approval request's tool and digest before it
runs; a task id presented anywhere else is never a way to name a call.

The SDK (2.3) carries the wire: ``resultType`` claims on ``tools/call``, extension methods
on the low-level server, capabilities under ``capabilities.extensions``; it has no task store
of its own, so the records, the states and the binding are here.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio

from .._canonical import digest
from .._principal import Principal

__all__ = ["NAMESPACE", "TASKS_EXTENSION", "GatewayTask", "TaskBook", "approval_link"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
NAMESPACE = "gateway.tasks"
"""The store namespace of task records (key: the task id)."""
CALLS_NAMESPACE = "gateway.task-calls"
"""The task of a waiting call (key: conversation session id and call id)."""
POLL_INTERVAL_MS = 1000
KEEP_AFTER_EXPIRY_S = 3600
"""A task stays readable this long after its approval request expires."""

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def approval_link(inbox_url: str | None, request_id: str) -> str | None:
    """The inbox page of one approval request (``None`` without a configured inbox)."""
    if not inbox_url:
        return None
    return f"{inbox_url.rstrip('/')}/approvals/{request_id}"


def principal_key(principal: Principal) -> tuple[str, str]:
    """Who a task belongs to: the principal id and the OAuth issuer it came from (if any)."""
    issuer = principal.attributes.get("issuer")
    return principal.id, str(issuer) if issuer is not None else ""


@dataclass(frozen=True, slots=True)
class GatewayTask:
    """One call waiting for (or completed after) a person's answer, as a task."""

    id: str
    principal: tuple[str, str]
    session_id: str
    handle: str | None
    tool: str
    """The gate's name of the tool (``server.tool``)."""
    arguments: Mapping[str, Any]
    digest: str
    call_id: str
    request_id: str
    created_at: str
    updated_at: str
    ttl_ms: int
    status: TaskStatus = "working"
    message: str = ""
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def expired(self, now: datetime | None = None) -> bool:
        """Past its ``ttlMs`` (from its creation): the task is gone for every request."""
        try:
            created = datetime.fromisoformat(self.created_at.replace("Z", "+00:00"))
        except ValueError:
            return True  # a record that cannot say when it began is treated as gone
        return (now or datetime.now(UTC)) > created + timedelta(milliseconds=self.ttl_ms)

    def envelope(self) -> dict[str, Any]:
        """The flat ``Task`` fields (the body of a ``CreateTaskResult``)."""
        task: dict[str, Any] = {"taskId": self.id, "status": self.status,
                                "createdAt": self.created_at,
                                "lastUpdatedAt": self.updated_at, "ttlMs": self.ttl_ms}
        if self.message:
            task["statusMessage"] = self.message
        if not self.terminal:
            task["pollIntervalMs"] = POLL_INTERVAL_MS
        return task

    def created(self) -> dict[str, Any]:
        """The ``tools/call`` answer creating (or joining) the task."""
        return {"resultType": "task", **self.envelope()}

    def detailed(self) -> dict[str, Any]:
        """The ``tasks/get`` answer: the task, with its result or error once terminal."""
        body = self.envelope()
        if self.status == "completed" and self.result is not None:
            body["result"] = dict(self.result)
        if self.status in ("failed", "cancelled") and self.error is not None:
            body["error"] = dict(self.error)
        return body

    def record(self) -> dict[str, Any]:
        return {"principal": list(self.principal), "session_id": self.session_id,
                "handle": self.handle, "tool": self.tool, "arguments": dict(self.arguments),
                "digest": self.digest, "call_id": self.call_id,
                "request_id": self.request_id, "created_at": self.created_at,
                "updated_at": self.updated_at, "ttl_ms": self.ttl_ms, "status": self.status,
                "message": self.message,
                "result": dict(self.result) if self.result is not None else None,
                "error": dict(self.error) if self.error is not None else None}

    @classmethod
    def from_record(cls, task_id: str, data: Mapping[str, Any]) -> GatewayTask:
        principal = data["principal"]
        return cls(id=task_id, principal=(str(principal[0]), str(principal[1])),
                   session_id=str(data["session_id"]), handle=data.get("handle"),
                   tool=str(data["tool"]), arguments=dict(data["arguments"]),
                   digest=str(data["digest"]), call_id=str(data["call_id"]),
                   request_id=str(data["request_id"]), created_at=str(data["created_at"]),
                   updated_at=str(data["updated_at"]), ttl_ms=int(data["ttl_ms"]),
                   status=data["status"], message=str(data.get("message") or ""),
                   result=data.get("result"), error=data.get("error"))

    def bound_to(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Whether this task is the call *tool* with *arguments* (its digest)."""
        return (tool == self.tool and self.digest == call_digest(tool, arguments)
                and call_digest(self.tool, self.arguments) == self.digest)


def call_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """The digest a task is bound to: the gateway's key of a call (tool and arguments)."""
    return digest({"tool": tool, "arguments": dict(arguments)})


class TaskBook:
    """The gateway's task records in the store, and the per-task locks of this process."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def lock(self, task_id: str) -> AsyncIterator[None]:
        """One finisher of a task at a time in this process (the entry goes with its last
        user: no growth with the number of tasks)."""
        lock, users = self._locks.get(task_id, (anyio.Lock(), 0))
        self._locks[task_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[task_id]
            if users <= 1:
                del self._locks[task_id]
            else:
                self._locks[task_id] = (lock, users - 1)

    async def create(self, *, principal: Principal, session_id: str, handle: str | None,
                     tool: str, arguments: Mapping[str, Any], call_id: str, request_id: str,
                     message: str, expires_at: datetime) -> GatewayTask:
        now = _now()
        ttl = max(int((expires_at - datetime.now(UTC)).total_seconds()) + KEEP_AFTER_EXPIRY_S,
                  KEEP_AFTER_EXPIRY_S) * 1000
        task = GatewayTask(id=f"anfitrion-task-{secrets.token_urlsafe(32)}",
                           principal=principal_key(principal), session_id=session_id,
                           handle=handle, tool=tool, arguments=dict(arguments),
                           digest=call_digest(tool, arguments), call_id=call_id,
                           request_id=request_id, created_at=now, updated_at=now, ttl_ms=ttl,
                           message=message)
        await self.save(task)
        await self.store.put_record(CALLS_NAMESPACE, _call_key(session_id, call_id),
                                    {"task": task.id})
        return task

    async def save(self, task: GatewayTask) -> None:
        await self.store.put_record(NAMESPACE, task.id, task.record())

    async def update(self, task: GatewayTask, **changes: Any) -> GatewayTask:
        changed = replace(task, updated_at=_now(), **changes)
        await self.save(changed)
        return changed

    async def load(self, task_id: str, principal: Principal) -> GatewayTask | None:
        """The task *task_id* of *principal*; ``None`` when there is none — or it is another
        principal's (the two are answered alike: nothing tells them apart)."""
        if not isinstance(task_id, str) or not task_id.startswith("anfitrion-task-"):
            return None
        data = await self.store.get_record(NAMESPACE, task_id)
        if data is None:
            return None
        task = GatewayTask.from_record(task_id, data)
        if task.principal != principal_key(principal) or task.expired():
            return None
        return task

    async def for_call(self, session_id: str, call_id: str,
                       principal: Principal) -> GatewayTask | None:
        """The task of the waiting call *call_id* of a conversation, if one was created."""
        data = await self.store.get_record(CALLS_NAMESPACE, _call_key(session_id, call_id))
        if data is None:
            return None
        task = await self.load(str(data.get("task", "")), principal)
        if task is None or task.session_id != session_id or task.call_id != call_id:
            return None
        return task


def _call_key(session_id: str, call_id: str) -> str:
    return f"{session_id}\x1f{call_id}"
