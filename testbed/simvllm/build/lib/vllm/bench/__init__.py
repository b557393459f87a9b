"""`vllm bench serve` of the simulated vLLM."""
