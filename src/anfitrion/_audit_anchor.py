"""Anchors: copies of the signed checkpoints kept outside the store.

Whoever controls the database can rewrite the whole chain; they cannot rewrite what was sent
elsewhere. Each checkpoint record (every hashed field, its signature inside) is written to every
anchor:

- ``file:///ABSOLUTE/PATH`` — one canonical JSON line appended per checkpoint (``O_APPEND``,
  fsync'd). Put it on another volume, ideally one the host can append to but not rewrite
  (``chattr +a``, a WORM mount, a log shipper).
- ``http://…`` / ``https://…`` — a webhook: each checkpoint is ``POST``-ed as JSON; ``GET`` on
  the same URL must answer the checkpoints received (a JSON array, or JSON lines) for
  ``anfitrion audit verify --anchor``.

S3-compatible object stores are documented (``docs/store.md``), not built in.

Writing never blocks the caller: :class:`AnchorQueue` hands entries to a thread that retries
with backoff and, after the last attempt, keeps the failure for the checkpointer to audit.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from ._canonical import canonical_json
from .exceptions import ConfigError

__all__ = ["Anchor", "AnchorFailure", "AnchorQueue", "FileAnchor", "HttpAnchor", "open_anchor"]

log = logging.getLogger("anfitrion.audit")

HTTP_TIMEOUT = 5.0
MAX_READ = 64 * 1024 * 1024
"""The most an anchor's answer may hold (bytes)."""


class Anchor(Protocol):
    @property
    def url(self) -> str: ...

    def write(self, entry: Mapping[str, Any]) -> None:
        """Append one checkpoint record; raise on failure."""
        ...

    def read(self) -> list[dict[str, Any]]:
        """Every checkpoint record held, in the order written."""
        ...


def _entries(text: str, where: str) -> list[dict[str, Any]]:
    text = text.strip()
    if not text:
        return []
    try:
        if text.startswith("["):
            found = json.loads(text)
        else:
            found = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the anchor {where} holds invalid JSON: {exc}") from None
    if not isinstance(found, list) or not all(isinstance(e, dict) for e in found):
        raise ConfigError(f"the anchor {where} does not hold checkpoint records")
    return found


@dataclass(frozen=True)
class FileAnchor:
    """An append-only file of checkpoint records, one canonical JSON line each."""

    path: Path

    @property
    def url(self) -> str:
        return f"file://{self.path}"

    def write(self, entry: Mapping[str, Any]) -> None:
        line = (canonical_json(dict(entry)) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        try:
            return _entries(self.path.read_text(encoding="utf-8"), self.url)
        except OSError as exc:
            raise ConfigError(f"cannot read the anchor {self.url}: {exc.strerror}") from None


@dataclass(frozen=True)
class HttpAnchor:
    """A webhook: ``POST`` each checkpoint as JSON, ``GET`` the ones received."""

    url: str
    timeout: float = HTTP_TIMEOUT

    def write(self, entry: Mapping[str, Any]) -> None:
        body = canonical_json(dict(entry)).encode("utf-8")
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout) as answer:
            if not 200 <= answer.status < 300:
                raise OSError(f"the anchor answered HTTP {answer.status}")

    def read(self) -> list[dict[str, Any]]:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as answer:
                data = answer.read(MAX_READ + 1)
        except (OSError, urllib.error.URLError) as exc:
            raise ConfigError(f"cannot read the anchor {self.url}: {exc}") from None
        if len(data) > MAX_READ:
            raise ConfigError(f"the anchor {self.url} answered more than {MAX_READ} bytes")
        return _entries(data.decode("utf-8", "replace"), self.url)


def open_anchor(url: str) -> Anchor:
    """The anchor named by *url*.

    Raises:
        ConfigError: not ``file:///absolute/path``, ``http(s)://…``; ``s3://`` (documented only).
    """
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ConfigError(f"bad anchor {url!r}: use file:///absolute/path")
        return FileAnchor(Path(unquote(parts.path)))
    if parts.scheme in ("http", "https") and parts.netloc:
        return HttpAnchor(url)
    if parts.scheme == "s3":
        raise ConfigError(f"anchor {url!r}: S3 anchors are not built in; ship the file anchor "
                          "to your bucket with object lock (docs/store.md)")
    raise ConfigError(f"bad anchor {url!r}: use file:///absolute/path or https://…")


def anchors_from(text: str | Iterable[str] | None) -> list[Anchor]:
    """Anchors from URLs separated by spaces or commas (``$ANFITRION_AUDIT_ANCHORS``)."""
    if text is None:
        return []
    urls = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    return [open_anchor(u) for u in urls]


@dataclass(frozen=True, slots=True)
class AnchorFailure:
    """A checkpoint an anchor did not take after every attempt."""

    url: str
    seq: int
    error: str


class AnchorQueue:
    """Writes checkpoint records to anchors from a thread of its own, in order per anchor,
    retrying after each of *retry_delays* seconds; the caller never waits for an anchor."""

    def __init__(self, anchors: Sequence[Anchor],
                 retry_delays: Sequence[float] = (1.0, 5.0, 30.0)) -> None:
        self.anchors = list(anchors)
        self.retry_delays = tuple(retry_delays)
        self._pending: deque[Mapping[str, Any]] = deque()
        self._failures: list[AnchorFailure] = []
        self._busy = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, entry: Mapping[str, Any]) -> None:
        """Queue *entry* for every anchor (returns at once)."""
        if not self.anchors:
            return
        with self._cond:
            self._pending.append(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="anfitrion-anchors",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def failures(self) -> list[AnchorFailure]:
        """The failures since the last call (each reported once)."""
        with self._cond:
            taken, self._failures = self._failures, []
        return taken

    def drain(self, timeout: float) -> bool:
        """Wait until every queued entry was written or given up; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                entry = self._pending.popleft()
                self._busy = True
            try:
                for anchor in self.anchors:
                    self._deliver(anchor, entry)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _deliver(self, anchor: Anchor, entry: Mapping[str, Any]) -> None:
        error = ""
        for delay in (*self.retry_delays, None):
            try:
                anchor.write(entry)
                return
            except Exception as exc:  # noqa: BLE001 - any failure of an anchor is retried
                error = f"{type(exc).__name__}: {exc}"
            if delay is not None:
                time.sleep(delay)
        log.warning("the anchor %s did not take checkpoint %s: %s", anchor.url,
                    entry.get("seq"), error)
        with self._cond:
            self._failures.append(AnchorFailure(anchor.url, int(entry.get("seq", 0)), error))
