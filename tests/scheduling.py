"""How `make test` hands tests to its pytest-xdist workers (`--dist loadgroup`): the tests of an `xdist_group` go to one
worker as one unit, first (the largest units lead), and every other test is handed out alone as workers free up, the
`slow` ones first ([`slow_first`]), so that no long test starts when the other worker is nearly done.

pytest >= 9.2 computes a test's id from its collection tree, so pytest-xdist 3.8 can no longer append the group name
to it (it sets the former `item._nodeid`) and its `loadgroup` would scatter a group. The scheduler below also groups
the test files named in [`GROUPS`], by their ids, which is all the controller sees of a test.
"""

from __future__ import annotations

import pytest


GROUPS = {"vllm": ("tests/test_vllm_engines.py::", "tests/test_vllm_server.py::")}
"""Groups by test-id prefix: the real-vLLM tests share one generation server (tests/vllm_server.py
`generation_server`), which only one worker running them in turn can share."""


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            if scope != nodeid:  # a group pytest-xdist could mark
                return scope
            return next((name for name, prefixes in GROUPS.items() if nodeid.startswith(prefixes)), nodeid)

    return GroupScheduling(config, log)


def slow_first(items: list) -> None:
    """Put the tests marked `slow` (the end-to-end runs, minutes each) before the others, each part in its order: the
    order every worker collects in, which the scheduler hands out."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
