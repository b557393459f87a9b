"""The report's second room: whether the nodes' runs may be merged (gate.py with its policy in
gate_policy.py; GPU sets in gpu_gate.py; recorded facts compared across nodes in consistency.py).
Imports only the scan below it."""
