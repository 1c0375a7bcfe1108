"""`python -m kiln.local.emulator --state-dir DIR`: the local AWS emulator (see server.py)."""

from kiln.local.emulator.server import main

raise SystemExit(main())
