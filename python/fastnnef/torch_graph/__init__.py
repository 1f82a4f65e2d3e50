"""Tracing and the intermediate representation of PyTorch graphs."""
