"""What the batcher's hops do with failures: the test-only fault hook
(HEADWISE_FAULT_INJECTION) and client errors stored without their traceback."""

from __future__ import annotations

import time

from headwise.service.engine.work import Entry
from headwise.service.errors import ServiceError

FAULT = "__headwise_fault__:"  # HEADWISE_FAULT_INJECTION=true only (tests): ...:error, ...:hang=SECONDS


def inject_fault(entries: list[Entry]) -> None:
    """Test-only hook, off unless settings.fault_injection: an input `__headwise_fault__:error`
    makes this batch's inference raise; `__headwise_fault__:hang=S` makes it block S seconds."""
    for e in entries:
        inputs = e.job.inputs
        text = inputs[e.index] if isinstance(inputs, list) and e.index < len(inputs) else ""
        if isinstance(text, str) and text.startswith(FAULT):
            what = text[len(FAULT):]
            if what.startswith("hang="):
                time.sleep(float(what[5:]))
            else:
                raise RuntimeError("injected backend fault")


def unlinked(e: Exception) -> Exception:
    """A client error without its traceback: the traceback's frames lead back (f_back) to the
    frame that stores the error in `out`, a cycle that kept the refused job's tokens (hundreds
    of MB for a large request refused for length) alive until a full garbage collection.
    Other errors keep theirs, for the log."""
    return e.with_traceback(None) if isinstance(e, ServiceError) else e
