"""`python -m kiln.emulator --state-dir DIR`: the local AWS emulator (see server.py)."""

from kiln.emulator.server import main

raise SystemExit(main())
