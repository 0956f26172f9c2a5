"""`python -m monitor.cli`: the same as the `rag-monitor` command."""

import sys

from monitor.cli import main

sys.exit(main())
