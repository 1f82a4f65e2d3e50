"""fastnnef: export PyTorch models to NNEF for tract, with a Rust core."""

__version__ = "0.1.0"
