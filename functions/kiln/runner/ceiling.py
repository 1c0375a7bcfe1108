"""No run lasts longer than a Lambda invocation can (900 s): the one statement of that limit.

Its own module, so that the settings, the catalog's rules and the admin tools read it without
the runner's limits (their dataclasses are ~2.5 ms of the public function's cold start, which
never runs a tool itself: tests/functional/lambda/test_cold_start_imports.py).
"""

from typing import Final

LAMBDA_MAX_TIMEOUT_S: Final = 900.0
