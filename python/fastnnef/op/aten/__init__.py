"""aten handler families, one module each (imported by ``op.registry.FAMILIES``)."""
