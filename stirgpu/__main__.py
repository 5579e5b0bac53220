"""``python -m stirgpu ...`` is the ``stirgpu`` command."""

import sys

from .cli.main import main

sys.exit(main())
