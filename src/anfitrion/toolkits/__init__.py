"""Built-in toolkits: narrow, least-privilege tools to use as they are or copy as patterns.

Each toolkit is a factory taking its configuration from the operator and returning a
:class:`~anfitrion._tools.Tool` or a :class:`~anfitrion._tools.Toolbox`:

- :func:`clock` — the current time in an IANA zone (read, trusted);
- :func:`files` — list, read, write a draft and delete, inside one folder;
- :func:`sqlite` / :func:`postgres` — read-only SQL by construction (``postgres`` needs the
  ``postgres`` extra);
- :func:`http_fetch` — GET from allow-listed hosts with SSRF protection (extra ``http``);
- :func:`mail` — draft an e-mail freely, send it after a person's approval.

Importing this package never imports an optional dependency; the factories that need one raise
:class:`~anfitrion.exceptions.MissingDependencyError` naming the ``pip install``.

Example:
    >>> from anfitrion import Toolbox
    >>> tools = Toolbox([clock()])
    >>> [t.name for t in tools]
    ['current_time']
"""

from __future__ import annotations

from .._drafts import draft_tools
from ._clock import clock
from ._files import files
from ._http_fetch import http_fetch, static_resolver
from ._mail import SmtpSettings, mail
from ._sql import postgres, sqlite

__all__ = ["SmtpSettings", "clock", "draft_tools", "files", "http_fetch", "mail", "postgres",
           "sqlite", "static_resolver"]
