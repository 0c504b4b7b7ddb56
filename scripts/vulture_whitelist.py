"""What vulture cannot see being used in src/spanpoint (``make lint``, tests/test_architecture).

Each entry is used by something outside the package's own calls: a framework calling its
interface, a user calling the public API, a test. A name that is none of these is dead code:
delete it rather than list it here.
"""
# ruff: noqa: B018

from vulture.whitelist_utils import Whitelist

_ = Whitelist()

# --- interfaces a framework calls --------------------------------------------------------
# LangChain callback handlers (events.SpanEventCallbackHandler, cassettes' recorder).
_.ignore_chain
_.run_inline
_.raise_error
_.on_chat_model_start
_.on_llm_start
_.on_llm_new_token
_.on_llm_end
_.on_llm_error
_.on_tool_start
_.on_tool_end
_.on_tool_error
_.on_retriever_start
_.on_retriever_end
_.on_retriever_error
_.on_chain_start
_.on_chain_end
_.on_chain_error
_.outputs  # a callback's parameter, named as LangChain passes it
_.parent_run_id
# LangChain agent middleware (CheckpointMiddleware, GuardMiddleware) and chat models (demo).
_.wrap_model_call
_.awrap_model_call
_.wrap_tool_call
_.awrap_tool_call
_.abefore_agent
_._generate
_._llm_type
_.bind_tools
# OpenTelemetry: the instrumentor's interface and span processors.
_.instrumentation_dependencies
_._instrument
_._uninstrument
_.on_start
_.on_end
# pytest (spanpoint.pytest_plugin) and typer (the CLI's commands).
_.pytest_addoption
_.pytest_configure
_.pytest_unconfigure
_.pytest_terminal_summary
_.pytest_runtest_protocol
_._spanpoint_cassette_marker
_.spanpoint_cassette
_.demo
_.doctor
_.gc
_.input_
_.show
# Python itself: a module's class (spanpoint._lazy), a hook's precomputed signature.
_.__class__
_.__signature__
# Fields of typed state and records, read by LangGraph or by users.
_.spanpoint_guard
_.guard_terminated
_.guard_reason
_.breaker
_.cost_usd
_.unpriced_calls
_.wall_seconds
_.detection_count
_.explanation
_.task_id
_.fingerprint_b

# --- public API a user calls ---------------------------------------------------------------
_.aresume
_.get_report
_.aget_report
_.resumable
_.patched  # spanpoint._patches: what spanpoint replaced right now
_.SpanEventCallbackHandler
_.renew_leases  # PostgresStore: leases renewed in one statement (the heartbeat's batch form)

# --- used by tests only: move to tests/ (each named with what keeps it here today) ---------
_.reset_for_tests  # config: spanpoint's state reset between tests (needs its internals)
_.installed  # calls.seams: the old name of seams.enabled(), warns for one release
_.installed_by  # calls.seams: whether a holder holds the seams (tests/calls, other change)
_.model_call_fingerprint_from_scratch  # calls.identity: the reference the incremental hash
# is checked against (tests/calls, bench/README; the identity change owns it)
_.has_checkpoint_middleware  # graph.inspect (tests/instrumentation)
_.counts_nodes  # graph.invoke (tests/graph)

# --- deleted by changes in flight (remove these lines when they land) --------------------
_.Job  # committer.Job: the commit-place change rewrites committer.py
_.tool_input_view  # calls.inputs: the one-spec-builder change deletes it

# --- public API and test-only readers added in this release ------------------------------
# vcrpy's `all_played`, a property users read after a cassette session.
_.all_played
# calls.tasks.durable_scope: read by tests/graph/test_resume_link.py to restore the scope.
_.durable_scope
