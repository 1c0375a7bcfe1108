"""AWS as Kiln uses it: clients made once from one botocore session, the catalog's own
resources (table and bucket definitions), and the trimmed botocore data they load."""

__all__ = ["clients", "directory"]
