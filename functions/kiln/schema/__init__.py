"""JSON Schema that cannot stall the server, worded one way.

safe       validation with RE2 patterns and a time budget
wording    what a keyword asks, in words, from the schema's value alone
arguments  a tool's arguments checked against its input schema (messages never echo input)
"""

__all__ = ["arguments", "safe", "wording"]
