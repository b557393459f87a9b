"""The program that travels to the workers (runner, GPU pool, crossover rounds, fit check, layout):
stdlib only at module level, nothing else of specfleet; placed as one zipapp, runner.pyz
(specfleet.campaign.spec.worker_zipapp). docs/dev/map.md."""
