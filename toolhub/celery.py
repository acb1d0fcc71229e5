"""The Celery app, configured from Django settings (the ``CELERY_`` namespace).

Without ``REDIS_URL`` the settings make tasks run eagerly in the calling process, so the
embedded default needs no broker or worker.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")

app = Celery("toolhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
