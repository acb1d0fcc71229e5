"""Admin change forms that write through the product's services.

An edit in the admin obeys the rules the pages and the API obey and leaves the same audit
entry, because it is made by the same service. The form is checked by running that
service in a transaction that is then rolled back: there is one set of rules, the
service's, and its refusal is the form's error, in the service's words. The save runs the
service for real (the admin's view wraps both in one transaction), and Django's own log
entry is not written: the service wrote one, with its reason.

A subclass says how its model is written (``service_save``) and deleted
(``service_delete``); ``row`` is the object as stored now (``None`` when adding), read
again so a dry run never changes the form's own instance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import models, transaction

from toolhub.lib.errors import ServiceError

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


class ServiceAdmin(_ModelAdmin):
    def service_save(self, request: Any, *, row: Any, data: dict[str, Any]) -> models.Model:
        """Create (``row`` is ``None``) or change the object from the form's cleaned data."""
        raise NotImplementedError

    def service_delete(self, request: Any, *, row: Any) -> None:
        raise NotImplementedError

    def get_form(self, request: Any, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        base = super().get_form(request, obj, change=change, **kwargs)
        owner = self

        def clean(form: forms.ModelForm[Any]) -> dict[str, Any]:
            data: dict[str, Any] = base.clean(form) or {}
            if form.errors:
                return data
            try:
                with transaction.atomic():
                    owner.service_save(request, row=owner._stored(obj), data=data)
                    transaction.set_rollback(True)
            except ServiceError as exc:
                _as_form_error(form, exc)
            return data

        return type(base.__name__, (base,), {"clean": clean})

    def _stored(self, obj: Any) -> Any:
        if obj is None or obj.pk is None:
            return None
        return type(obj)._default_manager.get(pk=obj.pk)

    def save_model(self, request: Any, obj: Any, form: Any, change: bool) -> None:
        try:
            saved = self.service_save(
                request, row=self._stored(obj) if change else None, data=form.cleaned_data
            )
        except ServiceError as exc:
            # Only a write made between the check and the save gets here (a stale version):
            # the admin's transaction rolls back and the person reads why.
            raise PermissionDenied(exc.message) from exc
        obj.pk = saved.pk
        obj.refresh_from_db()

    def save_related(self, request: Any, form: Any, formsets: Any, change: bool) -> None:
        # The service wrote everything the form holds; nothing is saved beside it.
        return None

    def delete_model(self, request: Any, obj: Any) -> None:
        try:
            self.service_delete(request, row=obj)
        except ServiceError as exc:
            raise PermissionDenied(exc.message) from exc

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    # The service already wrote the audit entry, with its reason.
    def log_addition(self, request: Any, obj: Any, message: Any) -> Any:
        return None

    def log_change(self, request: Any, obj: Any, message: Any) -> Any:
        return None

    def log_deletion(self, request: Any, obj: Any, object_repr: str) -> Any:
        return None

    def log_deletions(self, request: Any, queryset: Any) -> Any:
        return None


def _as_form_error(form: forms.ModelForm[Any], exc: ServiceError) -> None:
    """The service's message on the field it names, when the form has that field."""
    named = [name for name in exc.fields or {} if name in form.fields]
    if named:
        form.add_error(named[0], exc.message)
    else:
        form.add_error(None, exc.message)
