"""The ``calls`` strategy: model and tool calls as boundaries, inside a LangGraph agent.

``CheckpointMiddleware`` (``middleware``) wraps each model and tool call of a
``create_agent`` agent in a boundary; ``CallCheckpointPolicy`` (``policy``) says which calls
replay; ``identity`` fingerprints a call; ``attributes`` gives the GenAI attributes of its
``chat`` / ``execute_tool`` span. Inside the package the order is one way::

    policy ← identity · attributes ← middleware

Importing this package loads nothing: ``middleware`` imports ``langchain.agents`` (over a
second), so it is imported by name (``spanpoint.calls.middleware``) or lazily through
``spanpoint.CheckpointMiddleware``.
"""
