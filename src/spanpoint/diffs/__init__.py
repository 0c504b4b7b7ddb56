"""Two runs compared boundary by boundary, down to the first call where they diverge.

:func:`diff_runs` reads the store protocol only (``get_run``, ``list_checkpoints``,
``list_journal``). Each run is read in one attempt, the latest that did not fail
(:func:`spanpoint.forks.chosen_attempt`); its boundaries (:func:`run_boundaries`: what that
attempt executed and what it replayed) are walked in commit order and paired: the same call with
the same input first (equal identity path, ordinal and fingerprint), then by *label*: the
path ``spanpoint show`` prints with ``#N`` for the Nth boundary of that path
(``lookup_ticket#2``), as ``spanpoint fork --at`` takes it. The first boundary that differs
names the divergence:

* its input changed: the input fingerprints that entered the checkpoint keys differ;
* its output changed: another type, or other content;
* it is in one run only.

Content, not bytes: two live runs of the same agent never store the same bytes (LangChain
assigns message ids at run time, providers mint tool-call ids, response metadata and usage
vary), so outputs are compared as the fingerprints compare inputs — decoded through
:mod:`spanpoint.serde`'s allow list, message ids, tool-call ids, response metadata and
usage left out. An output that cannot be decoded (a type outside the allow list) is compared
by its bytes. Token and cost figures are not part of the comparison; each run's are shown.

The input difference is read from the checkpoints' ``input_view`` (redacted at commit):
message by message (by digest, so a difference past the shown text still counts), tool
definitions, model settings, tool arguments. Rows committed before input data existed have
none: such runs are still compared by output, and the result says input data is missing.

Inside the package, one way: ``types`` (the frozen result and its JSON shape) ← ``compare``
(the walk) and ``text`` (the terminal form ``spanpoint diff`` prints).
"""

from spanpoint.diffs.compare import (
    TEXT_LIMIT,
    diff_runs,
    input_diff,
    message_changes,
    output_texts,
    run_boundaries,
)
from spanpoint.diffs.text import render
from spanpoint.diffs.types import (
    SCHEMA,
    SCHEMA_VERSION,
    Change,
    Divergence,
    InputDiff,
    MessageChange,
    OutputDiff,
    Reason,
    RunDiff,
    RunSide,
    ValueChange,
)

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "TEXT_LIMIT",
    "Change",
    "Divergence",
    "InputDiff",
    "MessageChange",
    "OutputDiff",
    "Reason",
    "RunDiff",
    "RunSide",
    "ValueChange",
    "diff_runs",
    "input_diff",
    "message_changes",
    "output_texts",
    "render",
    "run_boundaries",
]
