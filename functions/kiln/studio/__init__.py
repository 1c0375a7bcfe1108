"""Kiln Studio: the authors' web app. Sources in `web/`, the committed build in `dist/`."""

__all__ = ["assets"]
