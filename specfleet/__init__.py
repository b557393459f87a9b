"""specfleet: a fleet runner for GPU inference benchmark campaigns.

A checkout keeps three parts of the package at the top level (roles/, tasks/, templates/ beside
specfleet/, the design card's layout); the relative symlinks specfleet/roles, specfleet/tasks and
specfleet/templates make them specfleet.roles, .tasks and .templates, in a checkout as in the wheel.
"""
