"""Take the screenshots in docs/images with Debian's Chromium: ``python tests/web/screenshot.py``.

A host suspends on an e-mail whose recipient hides a right-to-left override, and on a file write;
the pictures show the pending list and the e-mail's detail page.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: import the web test package

from playwright.sync_api import sync_playwright

from anfitrion import DeferredApprover, Effect, Host, Toolbox
from anfitrion.store import MemoryStore
from anfitrion.testing import ScriptedModel, call
from web.browser_support import CHROMIUM, CHROMIUM_ARGS, Resumer, off_loop
from web.inbox_support import RLO_RECIPIENT, TOKEN, Mailroom, mail_host


def main(out: Path) -> None:
    import socket
    import threading

    import uvicorn

    from anfitrion.web import create_app

    store, mailroom = MemoryStore(), Mailroom([])
    root = Path(tempfile.mkdtemp())
    (root / "drafts").mkdir()
    (root / "drafts" / "plan.md").write_text("# Plan\n\n- ship on Friday\n- tell the team\n",
                                             encoding="utf-8")
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def write_draft(path: str, content: str) -> str:
        """Write a draft under drafts/.

        Args:
            path: The draft's path.
            content: The new content.
        """
        return "written"

    files = Host(model=ScriptedModel([call("write_draft", {
        "path": "drafts/plan.md", "content": "# Plan\n\n- ship on Monday\n- tell the team\n"})]),
        tools=tools, store=store, approver=DeferredApprover())
    off_loop(lambda: files.run_sync("Move the release to Monday", principal="dana"))
    mail = mail_host(store, mailroom, {"to": RLO_RECIPIENT, "subject": "Quarterly numbers",
                                       "body": "Hi Bob,\nthe numbers are attached.\nAlice"})
    request = off_loop(lambda: mail.run_sync("Mail the numbers to Bob",
                                             principal="alice")).pending[0]
    app = create_app(store, token=TOKEN, files_root=root, on_answer=Resumer(mail))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 760})
            page.goto(f"{base}/login")
            page.fill("input[name=token]", TOKEN)
            page.fill("input[name=name]", "carol")
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/")
            page.screenshot(path=str(out.with_name("inbox-list.png")))
            page.goto(f"{base}/approvals/{request.id}")
            page.screenshot(path=str(out), full_page=True)
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images/inbox.png"))
