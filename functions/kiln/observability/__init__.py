"""What Kiln tells its operators: telemetry (one log line, metrics, traces per invocation)
and the redaction that keeps credentials out of every log record."""

__all__ = ["redact", "telemetry"]
