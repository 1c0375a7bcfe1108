"""AWS as Kiln uses it: clients made once from one botocore session, the catalog's own
resources (table and bucket definitions), the trimmed botocore data they load, and the hot
path's requests signed and sent without a client (`signed`): the runner function's invoke
(`invoke`), DynamoDB's PutItem and GetItem (`items`)."""

__all__ = ["clients", "directory", "invoke", "items", "signed"]
