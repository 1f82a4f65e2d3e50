"""Example models bundled with fastnnef (used by ``fastnnef demo`` and the tests)."""
