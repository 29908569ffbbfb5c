"""A small HTTP server on 127.0.0.1 that answers like a provider, for the real SDK clients.

The server is scripted: a *brain* looks at each request body (as the provider would) and returns
a complete response body in the provider's documented format. When the request asks for a
stream, the same body is cut into the provider's documented stream events. Every request is
recorded for assertions.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Brain = Callable[[str, dict[str, Any]], Any]
"""``(path, body) -> response body``; or ``(status, body)`` to answer an HTTP error."""


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeProvider:
    url: str
    requests: list[Recorded] = field(default_factory=list)
    chat_repeat_ids: bool = False

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


# -- stream encodings of a complete body ---------------------------------------------------------

def anthropic_events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            for piece in _pieces(block["text"]):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "text_delta", "text": piece}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            for piece in _pieces(json.dumps(block["input"]), 5):
                yield "content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"],
                                      "stop_sequence": None},
                            "usage": {"output_tokens": message["usage"]["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


def responses_events(response: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    n = iter(range(10_000))

    def event(kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, "sequence_number": next(n), **data}

    yield event("response.created",
                response={**response, "status": "in_progress", "output": [], "usage": None})
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "content": []})
            for c, part in enumerate(item["content"]):
                yield event("response.content_part.added", item_id=item["id"],
                            output_index=index, content_index=c,
                            part={**part, "text": ""})
                for piece in _pieces(part["text"]):
                    yield event("response.output_text.delta", item_id=item["id"],
                                output_index=index, content_index=c, delta=piece, logprobs=[])
                yield event("response.output_text.done", item_id=item["id"],
                            output_index=index, content_index=c, text=part["text"],
                            logprobs=[])
                yield event("response.content_part.done", item_id=item["id"],
                            output_index=index, content_index=c, part=part)
        else:
            yield event("response.output_item.added", output_index=index,
                        item={**item, "arguments": "", "status": "in_progress"})
            for piece in _pieces(item["arguments"], 5):
                yield event("response.function_call_arguments.delta", item_id=item["id"],
                            output_index=index, delta=piece)
            yield event("response.function_call_arguments.done", item_id=item["id"],
                        output_index=index, arguments=item["arguments"], name=item["name"])
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=response)


def chat_chunks(completion: dict[str, Any], repeat_ids: bool) -> Iterator[dict[str, Any]]:
    head = {"id": completion["id"], "object": "chat.completion.chunk",
            "created": completion["created"], "model": completion["model"]}
    message = completion["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        for piece in _pieces(message["content"]):
            yield chunk({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"],
                                                  "arguments": ""}}]})
        for piece in _pieces(call["function"]["arguments"], 4):
            delta: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if repeat_ids:  # as llama.cpp did: id and name again in every chunk
                delta["id"] = call["id"]
                delta["type"] = "function"
                delta["function"]["name"] = call["function"]["name"]
            yield chunk({"tool_calls": [delta]})
    yield chunk({}, completion["choices"][0]["finish_reason"])
    yield {**head, "choices": [], "usage": completion["usage"]}


# -- the server ----------------------------------------------------------------------------------

@contextmanager
def serve(brain: Brain, *, chat_repeat_ids: bool = False) -> Iterator[FakeProvider]:
    provider = FakeProvider("", chat_repeat_ids=chat_repeat_ids)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            with lock:
                provider.requests.append(
                    Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            answer = brain(self.path, body)
            status = 200
            if isinstance(answer, tuple):
                status, answer = answer
            if not body.get("stream") or status != 200:
                self._send(status, "application/json", json.dumps(answer).encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for line in self._events(answer):
                self.wfile.write(line.encode())
                self.wfile.flush()

        def _events(self, answer: Any) -> Iterator[str]:
            if isinstance(answer, list):  # a raw event list given by the test
                for name, data in answer:
                    prefix = f"event: {name}\n" if name else ""
                    text = data if isinstance(data, str) else json.dumps(data)
                    yield f"{prefix}data: {text}\n\n"
            elif self.path.endswith("/messages"):
                for name, data in anthropic_events(answer):
                    yield f"event: {name}\ndata: {json.dumps(data)}\n\n"
            elif self.path.endswith("/responses"):
                for name, data in responses_events(answer):
                    yield f"event: {name}\ndata: {json.dumps(data)}\n\n"
            else:
                for data in chat_chunks(answer, provider.chat_repeat_ids):
                    yield f"data: {json.dumps(data)}\n\n"
                yield "data: [DONE]\n\n"

        def _send(self, status: int, kind: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    provider.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# -- brains: the Lisboa scenario in each format -----------------------------------------------

FINAL = "It is 15 °C and partly cloudy in Lisboa."
CALLS = (("get_weather", {"location": "Lisboa, PT"}),)
TWO_CALLS = (("get_weather", {"location": "Lisboa, PT"}),
             ("get_weather", {"location": "Porto, PT", "units": "celsius"}))


def _turn(messages: list[Any]) -> str:
    """Call ids unique within a conversation, as real providers' are ("" on the first turn)."""
    return "" if len(messages) == 1 else f"{len(messages)}_"


def anthropic_brain(calls: tuple[tuple[str, Any], ...] = CALLS) -> Brain:
    def brain(path: str, body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        answered = isinstance(last["content"], list) and \
            any(b["type"] == "tool_result" for b in last["content"])
        usage = {"input_tokens": 100 + len(body["messages"]), "output_tokens": 20}
        base = {"id": f"msg_{len(body['messages'])}", "type": "message", "role": "assistant",
                "model": body["model"], "stop_sequence": None, "usage": usage}
        if answered:
            return {**base, "content": [{"type": "text", "text": FINAL}],
                    "stop_reason": "end_turn"}
        return {**base, "stop_reason": "tool_use", "content": [
            {"type": "text", "text": "Let me check."},
            *({"type": "tool_use", "id": f"toolu_0{_turn(body['messages'])}{i}", "name": name,
               "input": args}
              for i, (name, args) in enumerate(calls))]}
    return brain


def responses_brain(calls: tuple[tuple[str, Any], ...] = CALLS,
                    arguments: str | None = None) -> Brain:
    def brain(path: str, body: dict[str, Any]) -> Any:
        items = body["input"]
        answered = items[-1].get("type") == "function_call_output"
        base = {"id": f"resp_{len(items)}", "object": "response", "created_at": 1700000000,
                "model": body["model"], "status": "completed", "incomplete_details": None,
                "error": None, "parallel_tool_calls": True, "tool_choice": "auto",
                "tools": body.get("tools", []),
                "usage": {"input_tokens": 100 + len(items), "output_tokens": 20,
                          "total_tokens": 120 + len(items),
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
        bad_json_pending = arguments is not None and not any(
            i.get("type") == "function_call_output" for i in items)
        if answered and not bad_json_pending:
            return {**base, "output": [{
                "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": FINAL, "annotations": []}]}]}
        return {**base, "output": [
            {"type": "function_call", "id": f"fc_{_turn(items)}{i}",
             "call_id": f"call_{_turn(items)}{i}", "name": name,
             "arguments": arguments if arguments is not None else json.dumps(args),
             "status": "completed"}
            for i, (name, args) in enumerate(calls)]}
    return brain


def chat_brain(calls: tuple[tuple[str, Any], ...] = CALLS,
               arguments: str | None = None) -> Brain:
    def brain(path: str, body: dict[str, Any]) -> Any:
        messages = body["messages"]
        # a user message of a result's media may follow the tool messages
        answered = messages[-1]["role"] == "tool" or (
            len(messages) > 1 and messages[-1]["role"] == "user"
            and messages[-2]["role"] == "tool")
        base = {"id": f"chatcmpl-{len(messages)}", "object": "chat.completion",
                "created": 1700000000, "model": body["model"],
                "usage": {"prompt_tokens": 100 + len(messages), "completion_tokens": 20,
                          "total_tokens": 120 + len(messages)}}
        if answered:
            return {**base, "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": FINAL}}]}
        return {**base, "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{_turn(messages)}{i}", "type": "function", "function": {
                    "name": name,
                    "arguments": arguments if arguments is not None else json.dumps(args)}}
                for i, (name, args) in enumerate(calls)]}}]}
    return brain
