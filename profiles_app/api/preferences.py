"""JSON API for a person's own settings: what new chats start with and the look, as the
settings page changes them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from profiles_app import services
from toolhub.lib.api import validated_body


class SettingsSerializer(serializers.Serializer):
    new_chat_agent = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="The agent new chats start with (yours or a shared one); null: default",
    )
    new_chat_toolset = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=64,
        help_text="The profile or preset new chats start with; '' or default: default",
    )
    theme = serializers.ChoiceField(["system", "light", "dark"], required=False)
    compact_cards = serializers.BooleanField(required=False)


class SettingsView(APIView):
    @extend_schema(responses=SettingsSerializer)
    def get(self, request: Request) -> Response:
        return Response(services.personal_settings(user=request.user).to_json())

    @extend_schema(
        request=SettingsSerializer,
        responses={200: SettingsSerializer},
        description="Change the settings given, as the settings page does.",
    )
    def patch(self, request: Request) -> Response:
        data = validated_body(request, SettingsSerializer, partial=True)
        # Keys the schema does not name are ignored, as every PATCH here ignores them.
        fields = {key: value for key, value in data.items() if key in SettingsSerializer().fields}
        chosen = services.personal_settings_update(user=request.user, **fields)
        return Response(chosen.to_json())
