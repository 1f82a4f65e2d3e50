"""fastnnef's version, in a module of its own: the package's ``__init__`` re-exports it, and
what writes it into an artefact (``inference_target/tract.py``) reads it here rather than
from the package it is part of."""

__version__ = "0.1.0"
