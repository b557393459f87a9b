"""Which node runs what: the split of a campaign's items over the nodes and their GPU slots
(`split.py`, `slotsplit.py`), the lower bounds it is measured against (`bounds.py`) and the simulated
pool of a node's GPU sets (`gpusets.py`). Pure: plan and node facts in, queues out."""
