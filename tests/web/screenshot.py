"""Refresh the screenshots in docs/images: ``python tests/web/screenshot.py [FOLDER]``.

They are taken by the browser test that checks the layout
(``test_the_decision_is_in_view_with_the_call_at_desktop_and_phone_widths``): the pending list
and a request's page at desktop (1280×900) and phone (390×844) widths. That test writes them
to ``$ANFITRION_SCREENSHOTS`` when it is set, else to a temporary folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["ANFITRION_SCREENSHOTS"] = str(folder)
    here = Path(__file__).parent
    sys.exit(pytest.main([str(here / "test_browser.py"), "-q", "-k", "decision_is_in_view"]))
