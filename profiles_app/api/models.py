"""JSON API of the models a person can pick for a chat, by provider, as the composer's
Model select offers them (docs/models.md). Read-only: staff manage providers on the Ops
pages."""

from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from profiles_app.services.connections import provider_offers

ModelOfferSerializer = inline_serializer(
    "ModelOffer",
    many=True,
    fields={
        "name": serializers.CharField(help_text="What a chat's `model` names, before the colon"),
        "label": serializers.CharField(),
        "kind": serializers.ChoiceField(["anthropic", "openai", "demo"]),
        "models": inline_serializer(
            "OfferedModel",
            many=True,
            fields={
                "id": serializers.CharField(),
                "window": serializers.IntegerField(allow_null=True),
                "input": serializers.FloatField(
                    allow_null=True, help_text="US dollars per million input tokens"
                ),
                "output": serializers.FloatField(
                    allow_null=True, help_text="US dollars per million output tokens"
                ),
            },
        ),
    },
)


class ModelListView(APIView):
    @extend_schema(responses=ModelOfferSerializer)
    def get(self, request: Request) -> Response:
        """Every provider a chat can pick a model of, with its models."""
        return Response(
            [
                {
                    "name": offer.name,
                    "label": offer.label,
                    "kind": offer.kind,
                    "models": [asdict(entry) for entry in offer.models],
                }
                for offer in provider_offers()
            ]
        )
