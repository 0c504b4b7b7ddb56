"""The packages and versions the instrumentation patches (``instrumentation_dependencies``)."""

#: What ``SpanpointInstrumentor`` instruments, as opentelemetry-instrument checks it.
instruments = ("langgraph >= 1.2.20",)
