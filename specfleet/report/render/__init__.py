"""The report's fourth room: the documents (document.py: report.md / report.html through the
templates), plots, the llm-d export, the SLO (goodput.py) and telemetry sections. Imports the rooms
below it."""
