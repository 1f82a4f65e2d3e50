"""``python -m fastnnef.multimodal``: the ``fastnnef-multimodal`` command."""

from fastnnef.multimodal.cli import script

script()
