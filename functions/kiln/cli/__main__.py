"""`python -m kiln.cli`: the `kiln` command."""

from kiln.cli.main import main

raise SystemExit(main())
