"""The NNEF graph model (``graph.py``) and its text writer (``writer.py``)."""
