"""Facts: small typed values about a host, each the shell that gathers it and its parser
(specfleet/facts/base.py says how they are batched and shared)."""
