"""``python -m twc``."""

import sys

from twc.cli import main

sys.exit(main())
