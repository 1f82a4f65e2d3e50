"""``python -m fastnnef.llm``: the ``fastnnef-llm`` command."""

import sys

from fastnnef.llm.cli import main

sys.exit(main())
