"""Plugins: tools from configured modules and from the toolhub.tools entry-point group."""

from __future__ import annotations

import logging
import textwrap

from toolhub.tools import agent_tools, load_plugins

PLUGIN = textwrap.dedent(
    '''
    from toolhub.tools import function

    @function
    def {name}(city: str) -> str:
        """Weather for a city."""
        return "sunny in " + city
    '''
)


def _write_module(folder, module, tool):
    (folder / f"{module}.py").write_text(PLUGIN.format(name=tool))


async def test_a_configured_module_registers_its_tools_and_logs_it(
    tmp_path, monkeypatch, global_registry, caplog
):
    _write_module(tmp_path, "thp_configured", "thp_weather")
    monkeypatch.syspath_prepend(str(tmp_path))

    with caplog.at_level(logging.INFO, logger="toolhub.tools.plugins"):
        report = load_plugins(["thp_configured"], group="toolhub.tests.none")

    assert report == {"thp_configured": 1}
    assert "tool plugin thp_configured loaded: 1 tools" in caplog.text
    assert (await global_registry.get("thp_weather").execute({"city": "Oslo"})).content == (
        "sunny in Oslo"
    )
    assert "thp_weather" in agent_tools(global_registry).names


def test_a_module_that_fails_to_import_is_recorded_and_the_rest_still_load(
    tmp_path, monkeypatch, global_registry, caplog
):
    (tmp_path / "thp_broken.py").write_text("raise RuntimeError('missing dependency foo')\n")
    _write_module(tmp_path, "thp_fine", "thp_fine_tool")
    monkeypatch.syspath_prepend(str(tmp_path))

    report = load_plugins(["thp_broken", "thp_fine"], group="toolhub.tests.none")

    assert report["thp_broken"] == "RuntimeError: missing dependency foo"
    assert report["thp_fine"] == 1
    assert global_registry.load_errors == {"thp_broken": "RuntimeError: missing dependency foo"}
    assert "tool plugin thp_broken failed to load" in caplog.text


def test_entry_points_in_the_toolhub_tools_group_are_loaded(tmp_path, monkeypatch, global_registry):
    _write_module(tmp_path, "thp_entry", "thp_entry_tool")
    dist = tmp_path / "thp_entry_dist-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thp-entry-dist\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[toolhub.tools]\nweather = thp_entry\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    report = load_plugins()

    assert report["thp_entry"] == 1
    assert "thp_entry_tool" in global_registry
