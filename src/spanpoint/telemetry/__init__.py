"""OpenTelemetry plumbing that knows nothing of runs: exporters, providers, local files."""
