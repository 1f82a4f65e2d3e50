"""``python -m fastnnef.peft``: the ``fastnnef-peft`` command."""

from fastnnef.peft.cli import script

script()
