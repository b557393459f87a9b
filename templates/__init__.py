"""The files roles place on hosts (provision/) and the report's pages (report/): Jinja templates.

A package only so that it ships as `specfleet.templates` (specfleet.render finds the folder)."""
