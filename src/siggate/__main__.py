"""``python -m siggate`` (also what ``torchrun -m siggate`` runs)."""

import sys

from .cli import main

sys.exit(main())
