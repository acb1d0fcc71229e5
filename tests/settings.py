"""The product's settings (``toolhub.settings``, read from the environment as always) with
two changes a test run needs: a cheap password hasher, and Redis databases of the test
process's own (tests/workers.py).

Django's default PBKDF2 costs about a second of CPU per hash here, and every persona
fixture, demo account and browser sign-in pays it; MD5 makes that free. Nothing else
differs, so a test exercises the settings the product runs with. In-process tests read
this module (``pyproject.toml``); the processes the suite starts get it through
``tests.conftest.app_env``, except those whose subject is the settings themselves.
"""

import tests.workers  # noqa: F401  (this test process's Redis databases, first)
from toolhub.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
