"""``python -m fastnnef.llm``: the ``fastnnef-llm`` command."""

from fastnnef.llm.cli import script

script()
