"""Our chat handler for llama-cpp-python: tool calls a small model gets right.

llama-cpp-python's stock ``chatml-function-calling`` format fails with this model: it answers
``tool_choice: "required"`` with an error, ignores tools when ``tool_choice`` is omitted, rejects
assistant messages with ``content: null`` and never renders tool results into the prompt. This
handler does what works, measured on SmolLM2-135M:

1. the prompt is ChatML with the tools listed in the system turn and tool results rendered as
   ``<tool_response>`` blocks (content tokenized as plain text: see :mod:`._chatml`);
2. with ``tool_choice`` ``auto`` a grammar constrains the first token to either the opening of
   a tool call or text, with a logit bonus for the call (``call_bias``); ``required`` and a
   named tool skip that choice, ``none`` skips tools; a text reply is written from the prompt
   without the tool list and may not start with ``<``;
3. a grammar picks one of the offered tool names;
4. a grammar derived from that tool's JSON Schema constrains the arguments;
5. right after tool results, ``auto`` answers in text (``after_tool_result="text"``): a model
   this small otherwise calls the same tool again and again.

It follows llama-cpp-python's ``LlamaChatCompletionHandler`` protocol (``llama=``, ``messages=``,
``tools=``, ``tool_choice=``, ``stream=``, …) and returns Chat Completions dicts or chunks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ..exceptions import UserError
from ._chatml import (
    CALL_OPEN,
    CallChoice,
    RequestError,
    Segment,
    ToolSpec,
    Turn,
    read_messages,
    read_tool_choice,
    read_tools,
    render_prompt,
)
from ._grammar import DECIDE, ArgumentMode, arguments_grammar, name_grammar

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["ToolCallingHandler", "tokenize_prompt"]

_STOP = ["<|im_end|>", "<|im_start|>"]

# What the generation yields, in order: text pieces, or one call (start, argument pieces),
# then the end with its finish reason and the token counts.
_Event: TypeAlias = (tuple[Literal["text"], str] | tuple[Literal["call"], str, str]
                     | tuple[Literal["arguments"], str]
                     | tuple[Literal["end"], str, int, int])


@dataclass(frozen=True, slots=True)
class _Sampling:
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repeat_penalty: float
    seed: int | None


def tokenize_prompt(llama: Llama, segments: Sequence[Segment]) -> list[int]:
    """Tokens of a rendered prompt; special tokens are parsed only in template markers."""
    tokens: list[int] = []
    for text, special in segments:
        tokens.extend(llama.tokenize(text.encode("utf-8"), add_bos=False, special=special))
    return tokens


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(f"{key} must be a number from {low:g} to {high:g}", param=key)
    return float(value)


class ToolCallingHandler:
    """A llama-cpp-python chat handler that makes a small model call tools well.

    Args:
        arguments: ``schema`` (default) constrains arguments to the tool's JSON Schema;
            ``open`` lets the model add top-level keys the schema lacks; ``json`` only asks
            for a JSON object (wrong types, missing keys), as a server without grammar support
            would. The last two exist to show what the host does with real mistakes.
        after_tool_result: ``text`` (default) answers in text right after tool results when
            ``tool_choice`` is ``auto``; ``auto`` lets the model call again.
        call_bias: with ``tool_choice`` ``auto``, the logit bonus of the call branch over a
            text reply. On SmolLM2-135M the bonus a call needed was 1.8–5.4 for weather and
            note requests and 2.5–6.7 for chit-chat and trivia: 4.5 calls for most of the
            former and some of the latter; 0 leaves the choice to the model, which then
            almost never calls.
        max_argument_tokens: cap on the tokens of one call's arguments; arguments cut short
            are sent as they are (the host rejects them as invalid JSON).
        should_stop: polled between tokens; when it returns true, generation ends (shutdown).

    Example:
        >>> handler = ToolCallingHandler()                                   # doctest: +SKIP
        >>> llama = Llama(model_path, chat_handler=handler, n_threads=1)     # doctest: +SKIP
        >>> llama.create_chat_completion(messages=[...], tools=[...])        # doctest: +SKIP
    """

    def __init__(self, *, arguments: ArgumentMode = "schema",
                 after_tool_result: Literal["text", "auto"] = "text",
                 max_argument_tokens: int = 256, call_bias: float = 4.5,
                 should_stop: Callable[[], bool] | None = None) -> None:
        if arguments not in ("schema", "open", "json"):
            raise UserError(f"arguments must be 'schema', 'open' or 'json', not {arguments!r}")
        if after_tool_result not in ("text", "auto"):
            raise UserError("after_tool_result must be 'text' or 'auto'")
        self.arguments: ArgumentMode = arguments
        self.after_tool_result = after_tool_result
        self.max_argument_tokens = max_argument_tokens
        self.call_bias = call_bias
        self._tags: dict[int, list[int]] = {}
        self._should_stop = should_stop or (lambda: False)

    def __call__(self, *, llama: Llama, messages: Any, tools: Any = None,
                 tool_choice: Any = None, stream: bool = False, model: str | None = None,
                 **params: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """One chat completion (a dict) or, with ``stream=True``, an iterator of chunks.

        Raises:
            RequestError: the request is malformed or asks for something unsupported.
        """
        turns = read_messages(messages)
        specs = read_tools(tools)
        choice = read_tool_choice(tool_choice, specs)
        if choice == "none":
            specs = []
        body = {k: v for k, v in params.items() if v is not None}
        if body.get("n", 1) != 1:
            raise RequestError("only n=1 is supported", param="n")
        sampling = _Sampling(
            temperature=_number(body, "temperature", 0.0, 0.0, 2.0),
            top_p=_number(body, "top_p", 0.95, 0.0, 1.0),
            top_k=int(_number(body, "top_k", 40, 0, 1000)),
            min_p=_number(body, "min_p", 0.05, 0.0, 1.0),
            repeat_penalty=_number(body, "repeat_penalty", 1.1, 0.0, 10.0),
            seed=int(_number(body, "seed", 0, -(2**63), 2**63 - 1))
            if "seed" in body else None)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise RequestError("max_tokens must be a positive integer", param="max_tokens")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) for s in stop):
            raise RequestError("stop must be a string or a list of strings", param="stop")
        if turns[-1].role == "tool" and choice == "auto" and self.after_tool_result == "text":
            specs, choice = [], "none"
        prompt = self._prompt(llama, turns, specs)  # now: a stream must not fail after its start
        events = self._events(llama, prompt, turns, specs, choice, sampling, limit, stop)
        name = model or "local"
        if stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return self._chunks(events, name, include_usage)
        return self._completion(events, name)

    # -- generation --------------------------------------------------------------------------

    def _generate(self, llama: Llama, tokens: list[int], sampling: _Sampling, *,
                  grammar: str | None, max_tokens: int | None, stop: Sequence[str] = (),
                  logit_bias: dict[int, float] | None = None,
                  text_first: bool = False) -> Iterator[tuple[str, str | None]]:
        """Text pieces, each with ``None`` or, on the last, the finish reason.

        With *text_first*, the first token may not open a tag (``<…``): a reply in text does
        not start by echoing a tool result or by half-writing a call.
        """
        from llama_cpp.llama import LogitsProcessorList
        from llama_cpp.llama_grammar import LlamaGrammar

        if sampling.seed is not None:
            llama.set_seed(sampling.seed)
        # Evaluate the whole prompt every time. llama-cpp-python would otherwise reuse the
        # cached prefix of the previous request, and a prompt evaluated in another batch shape
        # gives slightly different logits: the same request could get another greedy answer.
        llama.reset()  # type: ignore[no-untyped-call]
        room = llama.n_ctx() - len(tokens)
        budget = room if max_tokens is None else min(max_tokens, room)
        if budget < 1:
            yield "", "length"
            return
        processors = None
        if text_first:
            banned = self._tag_tokens(llama)
            start = len(tokens)

            def ban_tags_first(input_ids: Any, scores: Any) -> Any:
                if len(input_ids) == start:
                    scores[banned] = -float("inf")
                return scores

            processors = LogitsProcessorList([ban_tags_first])
        stream = llama.create_completion(
            tokens, max_tokens=budget, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k, min_p=sampling.min_p, repeat_penalty=sampling.repeat_penalty,
            stop=[*_STOP, *stop], stream=True, logit_bias=logit_bias,
            logits_processor=processors,
            grammar=LlamaGrammar.from_string(grammar, verbose=False) if grammar else None)
        assert not isinstance(stream, dict)
        try:
            for chunk in stream:
                choice = chunk["choices"][0]
                finish = choice.get("finish_reason")
                if self._should_stop():
                    yield choice.get("text") or "", "stop"
                    return
                yield choice.get("text") or "", finish
                if finish is not None:
                    return
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _tag_tokens(self, llama: Llama) -> list[int]:
        """Ids of the tokens whose text starts with ``<`` (computed once per model)."""
        key = id(llama)
        if key not in self._tags:
            self._tags[key] = [i for i in range(llama.n_vocab())
                               if llama.detokenize([i]).lstrip().startswith(b"<")]
        return self._tags[key]

    def _events(self, llama: Llama, prompt: list[int], turns: Sequence[Turn],
                specs: Sequence[ToolSpec], choice: CallChoice, sampling: _Sampling,
                max_tokens: int | None, stop: Sequence[str]) -> Iterator[_Event]:
        if choice == "none" or not specs:
            yield from self._text(llama, prompt, sampling, max_tokens, stop, 0)
            return
        produced = 0
        if choice == "auto":
            # The first token decides: the opening of a call, or anything else (a text reply).
            # SmolLM2-135M rates "<" low even where a call is plainly wanted, so the call
            # branch gets a logit bonus of ``call_bias``, measured to separate the two.
            opening = llama.tokenize(b"<", add_bos=False, special=False)
            bias = {opening[0]: self.call_bias} if len(opening) == 1 else None
            first = ""
            for piece, _ in self._generate(llama, prompt, sampling, grammar=DECIDE,
                                           max_tokens=1, logit_bias=bias):
                produced += 1
                first += piece
            if not first.startswith("<"):
                # the prompt without the tool list is shorter: it fits if this one did
                plain = self._prompt(llama, turns, [])
                yield from self._text(llama, plain, sampling, max_tokens, stop, produced)
                return
            names = [s.name for s in specs]
        elif choice == "required":
            names = [s.name for s in specs]
        else:
            assert isinstance(choice, tuple)
            names = [choice[1]]
        yield from self._call(llama, prompt, specs, names, sampling, produced)

    def _prompt(self, llama: Llama, turns: Sequence[Turn],
                specs: Sequence[ToolSpec]) -> list[int]:
        prompt = tokenize_prompt(llama, render_prompt(turns, specs))
        if len(prompt) >= llama.n_ctx():
            raise RequestError(f"the prompt has {len(prompt)} tokens; the context holds "
                               f"{llama.n_ctx()}", param="messages",
                               code="context_length_exceeded")
        return prompt

    def _text(self, llama: Llama, prompt: list[int], sampling: _Sampling,
              max_tokens: int | None, stop: Sequence[str], produced: int) -> Iterator[_Event]:
        """A text reply, from a prompt without the tool list (that list asks for calls only)."""
        finish = "stop"
        for piece, reason in self._generate(llama, prompt, sampling, grammar=None,
                                            max_tokens=max_tokens, stop=stop, text_first=True):
            produced += 1
            if piece:
                yield ("text", piece)
            finish = reason or finish
        yield ("end", finish, len(prompt), produced)

    def _call(self, llama: Llama, prompt: list[int], specs: Sequence[ToolSpec],
              names: Sequence[str], sampling: _Sampling, produced: int) -> Iterator[_Event]:
        head = prompt + tokenize_prompt(llama, [(f'{CALL_OPEN}[\n{{"name": "', False)])
        if len(names) == 1:
            name = names[0]
        else:
            chosen = ""
            for piece, _ in self._generate(llama, head, sampling, grammar=name_grammar(names),
                                           max_tokens=32):
                produced += 1
                chosen += piece
            name = chosen.removesuffix('"')
            if name not in names:  # cut short (shutdown): nothing sensible to send
                yield ("end", "length", len(prompt), produced)
                return
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        yield ("call", call_id, name)
        spec = next(s for s in specs if s.name == name)
        body = head + tokenize_prompt(llama, [(f'{name}", "arguments": ', False)])
        grammar = arguments_grammar(spec.parameters, self.arguments)
        leading = True
        for piece, _ in self._generate(llama, body, sampling, grammar=grammar,
                                       max_tokens=self.max_argument_tokens):
            produced += 1
            if leading:
                piece = piece.lstrip()
                leading = not piece
            if piece:
                yield ("arguments", piece)
        yield ("end", "tool_calls", len(prompt), produced)

    # -- wire shapes -------------------------------------------------------------------------

    def _completion(self, events: Iterator[_Event], model: str) -> dict[str, Any]:
        text: list[str] = []
        calls: list[dict[str, Any]] = []
        finish, prompt_tokens, completion_tokens = "stop", 0, 0
        for event in events:
            if event[0] == "text":
                text.append(event[1])
            elif event[0] == "call":
                calls.append({"id": event[1], "type": "function",
                              "function": {"name": event[2], "arguments": ""}})
            elif event[0] == "arguments":
                calls[-1]["function"]["arguments"] += event[1]
            else:
                finish, prompt_tokens, completion_tokens = event[1], event[2], event[3]
        for c in calls:
            c["function"]["arguments"] = c["function"]["arguments"].rstrip()
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(text).strip() if not calls else None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def _chunks(self, events: Iterator[_Event], model: str,
                include_usage: bool) -> Iterator[dict[str, Any]]:
        """Chunks as OpenAI streams them: the call's id and name once, then argument pieces."""
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": ident, "object": "chat.completion.chunk", "created": created,
                    "model": model, "system_fingerprint": None,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                 "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        started = False
        for event in events:
            if event[0] == "text":
                piece = event[1].lstrip() if not started else event[1]
                started = started or bool(piece)
                if piece:
                    yield chunk({"content": piece})
            elif event[0] == "call":
                yield chunk({"tool_calls": [{"index": 0, "id": event[1], "type": "function",
                                             "function": {"name": event[2],
                                                          "arguments": ""}}]})
            elif event[0] == "arguments":
                yield chunk({"tool_calls": [{"index": 0,
                                             "function": {"arguments": event[1]}}]})
            else:
                yield chunk({}, event[1])
                if include_usage:
                    usage = {"prompt_tokens": event[2], "completion_tokens": event[3],
                             "total_tokens": event[2] + event[3]}
                    yield {**chunk({}), "choices": [], "usage": usage}
