"""Kiln: small scripts served as MCP tools from AWS Lambda."""

__version__ = "0.1.0"
