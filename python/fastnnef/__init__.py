"""fastnnef: export PyTorch models to NNEF for tract (minimal placeholder; the lead replaces it)."""

__version__ = "0.1.0"
