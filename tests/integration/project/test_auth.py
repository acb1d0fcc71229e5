"""Signing in and out, and what an anonymous visitor is allowed to see."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def test_an_anonymous_request_to_the_home_page_redirects_to_login(client):
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_signing_in_with_the_right_password_lands_on_the_chat(client, owner, password):
    response = client.post(
        "/accounts/login/", {"username": "owner", "password": password}, follow=True
    )

    # Through the Chat link's address to a chat ready for a first message.
    assert [hop for hop, _ in response.redirect_chain][-2] == "/chat/"
    assert re.fullmatch(r"/chat/[0-9a-f-]{36}/", response.redirect_chain[-1][0])
    assert response.status_code == 200
    assert "What can I help with?" in response.content.decode()


def test_the_status_table_is_for_operators(client, owner, staff):
    client.force_login(owner)
    assert client.get("/status/").status_code == 404
    assert client.get("/").headers["Location"] == "/chat/"
    client.force_login(staff)
    page = client.get("/status/")

    assert page.status_code == 200
    assert "System status" in page.content.decode()
    assert "database" in page.content.decode()


def test_signing_in_with_a_wrong_password_shows_an_error_and_stays_signed_out(client, owner):
    response = client.post("/accounts/login/", {"username": "owner", "password": "nope"})

    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert client.get("/").status_code == 302


def test_signing_out_ends_the_session(client, owner):
    client.force_login(owner)
    assert client.get("/chat/", follow=True).status_code == 200

    response = client.post("/accounts/logout/")

    assert response.status_code == 302
    assert client.get("/chat/")["Location"].startswith("/accounts/login/")


def test_pages_carry_a_strict_content_security_policy(client):
    response = client.get("/accounts/login/")

    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
