"""Real vLLM CPU build test tier: venv builder, toy model generator, serve/bench helpers.

See docs/engines-real.md.
"""
