"""Long-running tools: task records in DynamoDB, runs in a worker (local pool or Lambda)."""

__all__ = ["service", "settings", "store", "worker"]
