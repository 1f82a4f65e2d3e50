"""aten handler families, one module each (imported by ``op.families.FAMILIES``)."""
