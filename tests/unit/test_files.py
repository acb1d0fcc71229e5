"""Files a tool offers the person: names safe to save whatever the URI, bytes decoded
strictly, caps that hold, and a result cut for the model that keeps its files."""

from __future__ import annotations

import asyncio
import base64

import pytest

from toolhub.tools import ToolContext, ToolResult, function
from toolhub.tools.files import (
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_NAME_CHARS,
    ToolFile,
    clean_name,
    file_name,
    media_type,
    not_offered_line,
    offer,
    offered_line,
    size_in_words,
)

PDF = b"%PDF-1.7\n\x00\xff%%EOF\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("uri", "mime", "name"),
    [
        ("blob://reports/q3%20summary", "application/pdf", "q3 summary.pdf"),
        ("blob://reports/q3%20summary.pdf?version=2#page=3", "application/pdf", "q3 summary.pdf"),
        # A host with no path is the only name the URI has.
        ("blob://pixel", "image/png", "pixel.png"),
        ("file:///srv/data/", "text/csv", "data.csv"),
        ("note://x/caf%C3%A9%20menu.txt", "text/plain", "café menu.txt"),
        # A name the server chose keeps its extension, whatever the type says.
        ("file:///tmp/notes.md", "application/pdf", "notes.md"),
    ],
)
def test_a_file_is_named_after_the_last_segment_of_its_uri(uri, mime, name):
    assert file_name(uri, mime) == name


@pytest.mark.parametrize(
    ("uri", "name"),
    [
        # Encoded separators climb no directory: only the last segment is a name.
        ("file:///a/..%2F..%2Fetc%2Fpasswd", "passwd.pdf"),
        ("file:///a/..%5C..%5Cwindows%5Cwin.ini", "win.ini"),
        ("file:///a/../../etc/shadow", "shadow.pdf"),
        # Dots that would hide the file or name a directory go.
        ("file:///home/me/.bashrc", "bashrc.pdf"),
        ("file:///home/me/..", "file.pdf"),
        ("blob://x/%2E%2E", "file.pdf"),
        # Control bytes (NUL, ESC, CR LF: a header split) are taken out.
        ("blob://x/re%00port%1B%0D%0ASet-Cookie%3A%20a", "reportSet-Cookie_ a.pdf"),
        # A right-to-left override would show "fdp.exe" as "exe.pdf": it goes, and the name
        # shows the extension it has.
        ("blob://x/invoice%E2%80%AEfdp.exe", "invoicefdp.exe"),
        ("blob://x/%E2%80%8Bzero%E2%80%8Dwidth", "zerowidth.pdf"),
        # Quotes end a quoted name; what Windows refuses becomes "_".
        ('blob://x/"a"%27b%27%60c%60', "abc.pdf"),
        ("blob://x/a%3Cb%3E%7Cc%3F*d:e", "a_b__c__d_e.pdf"),
        ("blob://x/%20%20spaced%09%20out%20%20", "spaced out.pdf"),
        ("", "file.pdf"),
        ("blob://", "file.pdf"),
        # Bytes that are no UTF-8 show as what they are: undecodable.
        ("blob://x/%FF%FE", "\ufffd\ufffd.pdf"),
    ],
)
def test_a_name_from_an_odd_uri_is_one_safe_segment(uri, name):
    assert file_name(uri, "application/pdf") == name


def test_a_very_long_name_is_cut_keeping_its_extension():
    long = file_name("blob://x/" + "a" * 500 + ".tar", "application/x-tar")
    no_extension = file_name("blob://x/" + "b" * 500, "application/octet-stream")

    assert len(long) == MAX_NAME_CHARS
    assert long.endswith("a.tar")
    assert len(no_extension) == MAX_NAME_CHARS
    assert no_extension.endswith("b.bin")


@pytest.mark.parametrize(
    ("mime", "name"),
    [
        ("application/pdf", "file.pdf"),
        ("Application/PDF; charset=binary", "file.pdf"),
        ("audio/wav", "file.wav"),
        ("audio/mpeg", "file.mp3"),
        ("application/x-unheard-of", "file"),
        ("not a type", "file.bin"),
        (None, "file.bin"),
    ],
)
def test_a_name_without_one_gets_an_extension_from_the_type(mime, name):
    assert file_name(None, mime) == name


@pytest.mark.parametrize(
    ("declared", "kept"),
    [
        ("application/pdf", "application/pdf"),
        (" Text/HTML ; charset=utf-8", "text/html"),
        ("image/svg+xml", "image/svg+xml"),
        ("text/html\r\nX-Evil: 1", "application/octet-stream"),
        ("text/html, text/plain", "application/octet-stream"),
        ("pdf", "application/octet-stream"),
        ("", "application/octet-stream"),
        (None, "application/octet-stream"),
    ],
)
def test_only_a_well_formed_media_type_is_kept(declared, kept):
    assert media_type(declared) == kept


def test_a_file_is_offered_with_exactly_the_bytes_sent():
    file = offer(uri="blob://reports/q3%20summary", mime="application/pdf", data=b64(PDF))

    assert file == ToolFile("q3 summary.pdf", "application/pdf", PDF)
    assert offered_line(file) == (
        f"[file offered to the person: q3 summary.pdf, application/pdf, {len(PDF)} bytes]"
    )


@pytest.mark.parametrize(
    "data",
    [
        "not base64!",
        b64(PDF)[:-1],  # padding cut off
        b64(PDF)[:8] + " " + b64(PDF)[8:],
        "QUJD=A==",
        "\u0661\u0662\u0663\u0664",  # digits that are not ASCII
    ],
)
def test_data_that_is_not_strict_base64_is_not_offered(data):
    assert offer(uri="blob://x/a.pdf", mime="application/pdf", data=data) == (
        "its data is not base64"
    )


def test_a_file_over_the_size_cap_is_not_offered_and_one_at_it_is():
    at_cap = b"\x00" * MAX_FILE_BYTES
    over = at_cap + b"\x00"

    assert isinstance(offer(uri=None, mime="audio/wav", data=b64(at_cap)), ToolFile)
    assert offer(uri=None, mime="audio/wav", data=b64(over)) == (
        f"it is larger than {MAX_FILE_BYTES:,} bytes"
    )
    # Refused by its length alone: a huge string that is not even base64 is never decoded.
    assert offer(uri=None, mime="audio/wav", data="!" * (MAX_FILE_BYTES * 2)) == (
        f"it is larger than {MAX_FILE_BYTES:,} bytes"
    )


def test_a_result_offers_at_most_its_cap_of_files():
    data = b64(b"x")

    assert isinstance(offer(uri=None, mime=None, data=data, offered=MAX_FILES - 1), ToolFile)
    assert offer(uri=None, mime=None, data=data, offered=MAX_FILES) == (
        f"a result offers at most {MAX_FILES} files"
    )


def test_a_file_not_offered_is_a_line_with_its_name_size_and_why():
    line = not_offered_line(
        uri="blob://x/big%20talk", mime="audio/mpeg", data="A" * 40, why="it is too big"
    )

    assert line == "[file big talk.mp3 (audio/mpeg, about 30 bytes) not offered: it is too big]"


def test_a_tool_file_built_by_hand_is_made_safe_too():
    file = ToolFile("../..\u202e\x00.env\r\n", "text/html\nX: y", b"")

    assert file.name == "env"
    assert file.media_type == "application/octet-stream"
    assert clean_name("...") == "file"


@pytest.mark.parametrize(
    ("size", "words"),
    [
        (0, "0 bytes"),
        (1, "1 byte"),
        (999, "999 bytes"),
        (1_500, "1.5 KB"),
        (12_345, "12 KB"),
        (2_000_000, "2 MB"),
        (200_000_000, "200 MB"),
        (3_210_000_000, "3.2 GB"),
    ],
)
def test_a_size_reads_in_words(size, words):
    assert size_in_words(size) == words


def test_a_result_cut_for_the_model_keeps_its_files():
    pdf = ToolFile("report.pdf", "application/pdf", PDF)

    def long_report() -> ToolResult:
        return ToolResult(content="x" * 5_000, files=(pdf,), structured={"pages": 3})

    tool = function(long_report, max_result_chars=500, register_globally=False)
    result = asyncio.run(tool.execute({}, ToolContext(env={})))

    assert result.truncated
    assert len(result.content) <= 500
    assert result.files == (pdf,)
    assert result.structured == {"pages": 3}
