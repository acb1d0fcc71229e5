"""Images a tool returns: only what every provider takes is sent as an image."""

from __future__ import annotations

import base64

import pytest

from toolhub.tools.images import MAX_IMAGE_BYTES, ToolImage, sendable_image, stored_images

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 8).decode()
WEBP = base64.b64encode(b"RIFF\x00\x00\x00\x00WEBPVP8 ").decode()


@pytest.mark.parametrize(
    ("media_type", "data", "kept"),
    [
        ("image/png", PNG, "image/png"),
        ("image/JPG", JPEG, "image/jpeg"),
        (" image/webp", WEBP, "image/webp"),
    ],
)
def test_an_image_whose_bytes_are_its_type_is_sent(media_type, data, kept):
    assert sendable_image(media_type, data) == ToolImage(kept, data)


@pytest.mark.parametrize(
    ("media_type", "data", "why"),
    [
        ("image/jpeg", PNG, "its bytes are not a JPEG image"),
        ("image/svg+xml", PNG, "image/svg+xml is not a type models take"),
        (None, PNG, "no type is not a type models take"),
        ("image/png", "not base64!", "its data is not base64"),
        ("image/png", "", "its data is not base64"),
        ("image/webp", base64.b64encode(b"RIFF\x00\x00\x00\x00WAVE").decode(), "not a WEBP"),
        ("image/png", "A" * (MAX_IMAGE_BYTES * 4 // 3 + 8), "larger than 3,750,000 bytes"),
    ],
)
def test_an_image_no_provider_would_take_says_why(media_type, data, why):
    problem = sendable_image(media_type, data)

    assert isinstance(problem, str)
    assert why in problem


def test_stored_images_are_checked_again_as_they_are_read():
    stored = [
        {"media_type": "image/png", "data": PNG},
        {"media_type": "image/png", "data": JPEG},  # written by hand, or by an older version
        "not an image",
        {"media_type": "image/gif"},
    ]

    assert stored_images(stored) == (ToolImage("image/png", PNG),)
    assert stored_images("nope") == ()


def test_text_around_an_image_reaches_the_model_as_sent_without_the_line_for_it():
    from agent_app.history import tool_result_block
    from toolhub.tools.images import image_marker

    first, second = ToolImage("image/png", PNG), ToolImage("image/png", PNG[:-4] + "AAA=")
    text = "\n".join(
        ["before", image_marker(1, "image/png, about 16 bytes"), "between", image_marker(2, "x")]
    )

    block = tool_result_block(
        {
            "call_id": "c",
            "status": "ok",
            "content": text,
            "images": [first.to_json(), second.to_json()],
        },
        native=False,
    )

    kinds = [(item["type"], item.get("text")) for item in block["content"]]
    assert kinds == [("text", "before"), ("image", None), ("text", "between"), ("image", None)]


def test_an_image_whose_line_was_cut_away_follows_the_text_and_a_spoofed_line_stays_text():
    from toolhub.tools.images import interleave

    image = ToolImage("image/png", PNG)

    cut = interleave("head … tail", (image,))
    inline = interleave("say [image 1: x] mid-line", (image,))

    assert cut == ["head … tail", image]
    assert inline == ["say [image 1: x] mid-line", image]
