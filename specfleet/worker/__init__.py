"""The program that travels to the workers: the runner (one node's queue, its pool of GPU slots, the
crossover rounds, the prompt-fit check) and the names it writes (layout).

Standard library only at module level, and nothing from the rest of specfleet (the import-linter
contract in pyproject.toml); the venv's packages (tokenizers, for the fit check) are imported where
used. The bastion places it on a worker as one file, a zipapp (specfleet.campaign.spec.worker_zipapp):

    python3 runner.pyz --spec run.json            the runner (1 GPU or a node's pool)
    <venv>/bin/python runner.pyz fitcheck ...     the prompt-fit check
"""
