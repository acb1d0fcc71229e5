"""The API bench's yardstick: a bare DRF endpoint running the profiles list's query.

A plain ``APIView`` with DRF's own ``TokenAuthentication`` and ``IsAuthenticated``, the
same queryset the profiles list reads (``profiles_visible_to(user)`` with the same
columns, so the same SQL) and its rows handed back as plain dicts: what any DRF project
pays to answer that query to a token. Mounted by ``bench/api.py`` only, as this module's
URLconf (the product's, with one path in front), so the product never ships it.
"""

from __future__ import annotations

from django.urls import path
from rest_framework.authentication import TokenAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from profiles_app.services import profiles_visible_to
from toolhub.urls import urlpatterns as product_urlpatterns

BARE_PATH = "/api/bench-bare/profiles/"
# The profiles list's columns (profiles_app.services.profiles_for_user).
COLUMNS = ("pk", "name", "owner_id", "mode", "tools", "version", "approvals")


class BareProfileListView(APIView):
    authentication_classes = [TokenAuthentication]
    permission_classes = [IsAuthenticated]

    def get(self, request: Request) -> Response:
        rows = profiles_visible_to(request.user).values_list(*COLUMNS)
        return Response([dict(zip(COLUMNS, row, strict=True)) for row in rows])


# In front of the product's: its /api/ ends in a catch-all 404.
urlpatterns = [path(BARE_PATH.lstrip("/"), BareProfileListView.as_view()), *product_urlpatterns]
