"""Long-running tools: task records in DynamoDB, runs in a worker (local pool or Lambda);
calls that wait for a person's approval (approving)."""

__all__ = ["approving", "service", "settings", "store", "worker"]
