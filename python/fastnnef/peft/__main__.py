"""``python -m fastnnef.peft``: the ``fastnnef-peft`` command."""

import sys

from fastnnef.peft.cli import main

sys.exit(main())
