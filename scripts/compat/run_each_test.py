"""pytest plugin: each test inside ``spanpoint.run(<its node id>)``.

Loaded by ``scripts/compat/upstream_suite.py --config run`` after ``spanpoint.pytest_plugin``
(``-p run_each_test``, found on the ``PYTHONPATH`` the script sets). Setup, call and teardown
of one test share one run, so every model and tool call the test makes is a durable boundary
of that run, the way an application that wraps its work in ``spanpoint.run`` sees them. Node
ids are unique in a session, so no test can replay another test's calls. A second session
on the same store (``--second-session``) names its runs ``second:<node id>``: the same id
would be a rerun of the first session's run, which replays it by design.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    """Run the whole protocol of ``item`` inside its own spanpoint run."""
    # For import time: pytest loads the plugin before spanpoint is configured.
    import spanpoint

    session = os.environ.get("SPANPOINT_COMPAT_SESSION")
    with spanpoint.run(f"{session}:{item.nodeid}" if session else item.nodeid):
        yield
