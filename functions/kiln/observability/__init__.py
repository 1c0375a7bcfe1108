"""What Kiln tells its operators: telemetry (one log line, metrics, traces per invocation)
and the redaction that keeps credentials out of every log record; the runner function's
lighter `plain` (stdlib logging and its ColdStart line, no Powertools)."""

__all__ = ["plain", "redact", "telemetry"]
