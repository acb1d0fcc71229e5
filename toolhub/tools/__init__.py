"""The tool runtime: pure Python, importing nothing from Django.

``@function`` builds and registers a ``Tool``; the ``registry`` keeps them in registration
order; ``agent_tools`` filters them through layers 1 to 5 with a reason for every tool it
leaves out; presets (``PRESETS``) name subsets; ``ToolIntent`` is what people store;
``resolve`` expands intent into the exact, fingerprinted tools array with its deferred
catalog, ``token_cost`` counts it in tokens, and ``TurnTools`` freezes it for a turn. The
built-in tool pack registers on import. The Django apps adapt this package through the
interfaces in ``context`` and never re-implement it.
"""

from toolhub.tools import builtin  # noqa: F401  (registers the built-in pack)
from toolhub.tools.context import (
    CancelToken,
    RuntimeSettings,
    TailAccumulator,
    TailUpdate,
    ToolContext,
    ToolServices,
)
from toolhub.tools.decorator import function
from toolhub.tools.intent import IntentError, ToolIntent
from toolhub.tools.intent_selection import ProfileSpec
from toolhub.tools.layers import Hidden, Selection, agent_tools, availability
from toolhub.tools.plugins import load_plugins
from toolhub.tools.presets import (
    DEFAULT_PRESET,
    PRESETS,
    Toolset,
    ToolsetCycleError,
    UnknownToolsetError,
    default_tools,
    define_toolsets,
    toolset_members,
)
from toolhub.tools.registry import DuplicateToolError, ToolRegistry, all_tools, get, registry, reset
from toolhub.tools.resolve import ResolvedToolset, TokenCost, resolve, token_cost
from toolhub.tools.tiers import TierPlan
from toolhub.tools.tool import Tool, ToolResult
from toolhub.tools.turn import CallTarget, TurnTools

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "CallTarget",
    "CancelToken",
    "DuplicateToolError",
    "Hidden",
    "IntentError",
    "ProfileSpec",
    "ResolvedToolset",
    "RuntimeSettings",
    "Selection",
    "TailAccumulator",
    "TailUpdate",
    "TierPlan",
    "TokenCost",
    "Tool",
    "ToolContext",
    "ToolIntent",
    "ToolRegistry",
    "ToolResult",
    "ToolServices",
    "Toolset",
    "ToolsetCycleError",
    "TurnTools",
    "UnknownToolsetError",
    "agent_tools",
    "all_tools",
    "availability",
    "default_tools",
    "define_toolsets",
    "function",
    "get",
    "load_plugins",
    "registry",
    "reset",
    "resolve",
    "token_cost",
    "toolset_members",
]
