"""``python -m fastnnef.multimodal``: the ``fastnnef-multimodal`` command."""

import sys

from fastnnef.multimodal.cli import main

sys.exit(main())
