"""`fab compare`: two collected campaigns side by side (comparison.py) and its outputs
(compare_render.py: a CompareModel rendered through templates/compare/ as the report's pages). The top room with build.py (`fab report`'s pipeline); neither imports the other."""
