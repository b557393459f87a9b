"""Jinja templates: files roles place (provision/) and the report's pages (report/)."""
