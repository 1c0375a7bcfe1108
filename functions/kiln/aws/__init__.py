"""AWS as Kiln uses it: clients made once from one botocore session, the catalog's own
resources (table and bucket definitions), the trimmed botocore data they load, and the runner
function's invoke signed without a client."""

__all__ = ["clients", "directory", "invoke"]
