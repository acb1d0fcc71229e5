"""Staff connect a model provider on the Ops pages, and a person picks its model in a
chat's options: the product (a daphne of its own) asks the fake OpenAI-compatible server's
models endpoint over real HTTP, and the chat's turn goes to it with that model's window
and prices (docs/models.md)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import SCREENSHOTS, open_new_chat, open_options
from tests.fakes import FakeOpenAI

KEY = "sk-browser-test-key"


def test_staff_connect_a_provider_and_a_chat_answers_with_its_model(product, page):
    base, password = product
    with FakeOpenAI(models={"llama-small": {"max_model_len": 8192}}, api_key=KEY) as fake:
        open_new_chat(page, base, password)
        chat = page.url
        page.get_by_role("link", name="Ops").click()
        page.get_by_role("navigation", name="Ops pages").get_by_role(
            "link", name="Model providers"
        ).click()
        adding = page.get_by_role("region", name="Add a provider")
        adding.get_by_label("Name").fill("local")
        adding.get_by_label("Kind").select_option(label="OpenAI-compatible")
        adding.get_by_label("Base URL").fill(f"{fake.url}/v1")
        adding.get_by_label("API key").fill(KEY)
        adding.get_by_label("Models of your own").fill("llama-small, , 0.5, 1.5")
        adding.get_by_role("button", name="Add the provider").click()

        expect(page.get_by_text("Saved local: it lists 1 model.")).to_be_visible()
        card = page.locator("#provider-local")
        card.get_by_text("1 model").click()
        expect(card.get_by_role("row", name="llama-small")).to_contain_text("8,192")
        expect(card.get_by_role("row", name="llama-small")).to_contain_text("0.5")
        # The key is never drawn back, not even into the password box.
        assert KEY not in page.content()
        page.screenshot(path=SCREENSHOTS / "providers_page.png", full_page=True)

        page.goto(chat)
        open_options(page)
        page.get_by_label("Model", exact=True).select_option("local:llama-small")
        expect(
            page.get_by_role("group", name="Chat options").get_by_text(
                "From your next message, the model is llama-small."
            )
        ).to_be_visible()
        page.screenshot(path=SCREENSHOTS / "model_picker.png")
        page.get_by_label("Message").fill("hello there")
        page.get_by_label("Message").press("Enter")

        answered = page.locator(".turn-end .answered-by").last
        expect(answered).to_contain_text("· llama-small", timeout=20_000)
        (asked,) = fake.wait_for_requests(1)
        assert asked.body["model"] == "llama-small"
        # Its window is the gauge's, and its prices the answer's cost.
        expect(page.locator("[data-gauge-text]")).to_contain_text("of 8,192 tokens")
        expect(page.locator(".turn-end .usage").last).to_contain_text("~$")
    assert page.console_errors == []
