"""The report's third room: the merged tables and what they say (merge.py, measures.py: speedups and
their intervals, conclusions.py, diagnosis.py, categories.py, crossover_curve.py). Imports the gates
and the scan below it; renders nothing."""
