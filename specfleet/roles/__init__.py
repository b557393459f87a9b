"""Roles: what a host should look like, as lists of steps (see specfleet.step)."""
