"""The client toolset's side of the Tasks extension (``io.modelcontextprotocol/tasks``,
SEP-2663): a 2026-07-28 server may answer ``tools/call`` with a task instead of its result (an
anfitrion gateway does, for a call that waits for a person); the toolset polls ``tasks/get``
until the task ends and takes the executed result inlined in it.

On the SDK's claim mechanism (a ``resultType: "task"`` claim on ``tools/call``): the extension
is declared only on 2026-07-28 connections. The whole wait counts against the call's timeout:
a task not finished by then is cancelled (``tasks/cancel``), so the server does not run later
a call whose caller gave up on it, and the call fails saying so. A task that asks for input
(``input_required``) is cancelled likewise: answering a task's questions is not built; so is a
task whose ``tasks/get`` answer cannot be read (no status, another shape, over the message size
limit), and the call fails saying so.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio

try:
    import mcp.types as mt
    from mcp.client.extension import ClaimContext, ResultClaim
    from mcp.client.session import ClientSession
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    from ._oversized import is_oversized_marker
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from ..exceptions import MissingDependencyError

    raise MissingDependencyError("mcp", "mcp") from exc

__all__ = ["TASKS_EXTENSION", "UpstreamTask", "cancel_quietly", "task_claims", "until_done"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
MIN_POLL, MAX_POLL = 0.05, 5.0
"""Seconds between two ``tasks/get`` (the server's ``pollIntervalMs``, bounded)."""


class _TaskState(BaseModel):
    """What ``tasks/get`` (and ``tasks/cancel``) answer, as far as it is read here."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    status: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    poll_interval_ms: Any = Field(default=None, alias="pollIntervalMs")


class UpstreamTask(mt.Result):
    """SEP-2663's ``CreateTaskResult``: flat, ``resultType: "task"``."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None


def _interval(value: Any) -> float:
    if not isinstance(value, int) or isinstance(value, bool):
        return 1.0
    return min(max(value / 1000, MIN_POLL), MAX_POLL)


async def cancel_quietly(session: ClientSession, task_id: str) -> None:
    """``tasks/cancel``, shielded and bounded (the call is ending anyway)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
        try:
            await session.send_request(mt.CancelTaskRequest(
                params=mt.CancelTaskRequestParams(task_id=task_id)), _TaskState)
        except Exception:  # noqa: BLE001 - a server that cannot cancel: the call fails anyway
            return


async def until_done(task: UpstreamTask, context: ClaimContext) -> mt.CallToolResult:
    """Poll ``tasks/get`` until the task ends: its inlined result, or an error result with
    the server's reason. Cancelled (and the task with it) when the call's time is up."""
    session, delay = context.session, _interval(task.poll_interval_ms)
    try:
        while True:
            try:
                got = await session.send_request(mt.GetTaskRequest(
                    params=mt.GetTaskRequestParams(task_id=task.task_id)), _TaskState)
                status = got.status
                if _oversized(got):  # the line was dropped unread (``_oversized``)
                    return await _refused(session, task, "was over the size limit of a "
                                          "message from this server")
                if status is None:
                    return await _refused(session, task, "had no status")
                result = mt.CallToolResult.model_validate(got.result or {}) \
                    if status == "completed" else None
            except ValidationError:
                return await _refused(session, task, "did not have the shape of a task")
            if result is not None:
                if not result.is_error:
                    await session.validate_tool_result(context.tool_name, result)
                return result
            if status in ("failed", "cancelled"):
                reason = str((got.error or {}).get("message") or status)[:500]
                return mt.CallToolResult(content=[mt.TextContent(
                    type="text", text=f"the server's task {status}: {reason}")], is_error=True)
            if status != "working":  # input_required: not answered here
                await cancel_quietly(session, task.task_id)
                return mt.CallToolResult(content=[mt.TextContent(
                    type="text", text=f"the server's task asked for input ({status}), which "
                    "this client does not answer: the task was cancelled")], is_error=True)
            if got.poll_interval_ms is not None:
                delay = _interval(got.poll_interval_ms)
            await anyio.sleep(delay)
    except BaseException:  # the call's time is up (or it was cancelled): so is the task
        await cancel_quietly(session, task.task_id)
        raise


def _oversized(got: _TaskState) -> bool:
    meta = (got.model_extra or {}).get("_meta")
    return isinstance(meta, dict) and is_oversized_marker(mt.CallToolResult(content=[],
                                                                            _meta=meta))


async def _refused(session: ClientSession, task: UpstreamTask, why: str) -> mt.CallToolResult:
    """A ``tasks/get`` answer that cannot be read: the task is cancelled, the call failed (the
    server may have acted: whether it did is unknown)."""
    await cancel_quietly(session, task.task_id)
    return mt.CallToolResult(content=[mt.TextContent(
        type="text", text=f"the server's tasks/get answer {why}: the task was cancelled, and "
        "whether it acted is unknown")], is_error=True)


def task_claims() -> dict[str, list[ResultClaim[Any]]]:
    """``ClientSession(result_claims=…)``: the task shape of ``tools/call``."""
    return {TASKS_EXTENSION: [ResultClaim(result_type="task", model=UpstreamTask,
                                          resolve=until_done)]}
