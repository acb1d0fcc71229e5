"""Loading tools from plugins: modules named in a setting, and the ``toolhub.tools``
entry-point group.

Modules load in a fixed order (entry points sorted by name, then the configured modules in
the order given) so registration order, and with it every tool array, is the same in every
process. A module that fails to import is logged and recorded on the registry; the product
still starts and the catalog shows the failure.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from importlib.metadata import entry_points

from toolhub.tools.registry import ToolRegistry
from toolhub.tools.registry import registry as default_registry

ENTRY_POINT_GROUP = "toolhub.tools"

logger = logging.getLogger(__name__)


def load_plugins(
    modules: Iterable[str] = (),
    *,
    registry: ToolRegistry | None = None,
    group: str = ENTRY_POINT_GROUP,
) -> dict[str, int | str]:
    """Import every plugin module once; returns module → tools added, or the error."""
    registry = default_registry if registry is None else registry
    targets = [point.value for point in sorted(entry_points(group=group), key=lambda p: p.name)]
    targets += [module for module in modules if module not in targets]
    report: dict[str, int | str] = {}
    for module in targets:
        before = len(registry)
        try:
            importlib.import_module(module.split(":", 1)[0])
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            registry.record_load_error(module, reason)
            logger.error("tool plugin %s failed to load: %s", module, reason)
            report[module] = reason
            continue
        added = len(registry) - before
        logger.info("tool plugin %s loaded: %d tools", module, added)
        report[module] = added
    return report
