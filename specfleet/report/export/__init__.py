"""The report's exports for other tools: llm-d's Benchmark Report v0.2 (llmd.py)."""
