"""The version-6 operations refuse malformed input before anything is
sent, with the code the SQL would raise (no database needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fenceq import ops
from fenceq.backends import protocol
from fenceq.errors import ConfigError
from fenceq.types import Fence

FENCE = Fence("job-1", "owner", 1, "token")


@pytest.mark.parametrize("build, sqlstate", [
    (lambda: ops.create_queue("q", requeue_priority="front"), "QF100"),
    (lambda: ops.alter_queue("q", requeue_priority=""), "QF100"),
    (lambda: ops.reserve_dispatch(None, "farm", "key"), "QF106"),
    (lambda: ops.reserve_dispatch(Fence("job-1", "owner", 0, "token"), "farm", "key"), "QF106"),
    (lambda: ops.reserve_dispatch(FENCE, "f" * 256, "key"), "QF102"),
    (lambda: ops.reserve_dispatch(FENCE, "farm", "k" * 1025), "QF102"),
    (lambda: ops.finalize_dispatch(FENCE, "key", ""), "QF102"),
    (lambda: ops.release_dispatch(FENCE, None), "QF102"),
    (lambda: ops.replace_dispatch_ref(FENCE, "old", 7), "QF102"),
    (lambda: ops.adopt_dispatch("j" * 37, "farm", "key", "owner", "token"), "QF102"),
    (lambda: ops.adopt_dispatch("job-1", "farm", "key", "owner", "token", lease=timedelta(0)), "QF105"),
    (lambda: ops.dispatch_repair_candidates("farm", max_rows=0), "QF104"),
    (lambda: ops.dispatch_repair_candidates("farm", max_rows=100_001), "QF104"),
    (lambda: ops.set_queue_history("q", "yes"), "QF100"),
    (lambda: ops.set_queue_history("q", True, retention=timedelta(0)), "QF105"),
    (lambda: ops.get_job_events(""), "QF102"),
    (lambda: protocol.dispatches(limit=0), "QF104"),
])
def test_malformed_input_is_refused_with_the_sql_code(build, sqlstate):
    with pytest.raises(ConfigError) as info:
        build()
    assert info.value.sqlstate == sqlstate


def test_the_longest_names_and_refs_pass():
    op = ops.finalize_dispatch(FENCE, "k" * 1024, "e" * 1024)
    assert [arg.name for arg in op.args][-2:] == ["reservation_ref", "execution_ref"]
    assert ops.reserve_dispatch(FENCE, "f" * 255, "key").returns is bool


def test_requeue_priority_is_sent_only_when_given():
    """alter_queue's NULL means unchanged; leaving it out keeps the call
    valid on a schema older than version 6."""
    assert "requeue_priority" not in [arg.name for arg in ops.alter_queue("q").args]
    created = ops.create_queue("q", requeue_priority="first")
    assert ("requeue_priority", "first") in [(arg.name, arg.value) for arg in created.args]
