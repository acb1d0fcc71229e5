"""``calculate``: arithmetic on numbers, evaluated from the syntax tree, never with eval.

Only number literals, the named constants and functions below, unary and binary
arithmetic and parentheses are accepted. Sizes are bounded *before* anything is computed:
a power whose integer result would exceed ``MAX_RESULT_BITS`` is refused from its
operands' sizes, as is a ``round`` to more than ``MAX_ROUND_DIGITS`` places. This matters
because one big-integer operation holds the interpreter lock from start to end, so it
would stall every socket of the server even in a worker thread.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from toolhub.tools.decorator import function

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 10_000
MAX_INT_DIGITS = 4_000
MAX_RESULT_BITS = int(MAX_INT_DIGITS * 3.33)
MAX_ROUND_DIGITS = 1_000

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "floor": math.floor,
    "ceil": math.ceil,
    "factorial": math.factorial,
}


def evaluate(expression: str) -> int | float:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    value: int | float = _eval(tree.body)
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _bounded(_BINARY[type(node.op)](left, right))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_eval(arg) for arg in node.args]
        if node.func.id == "factorial" and args and args[0] > 1000:
            raise ValueError("factorial argument larger than 1000")
        if node.func.id == "round" and len(args) > 1 and abs(args[1]) > MAX_ROUND_DIGITS:
            raise ValueError(f"round to at most {MAX_ROUND_DIGITS} digits")
        return _bounded(_FUNCTIONS[node.func.id](*args))
    raise ValueError(f"not allowed in a calculation: {ast.unparse(node)!r}")


def _check_power(base: Any, exponent: Any) -> None:
    """Refuse a power whose result would be too large, from the operands alone."""
    if isinstance(exponent, int | float) and abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent larger than {MAX_EXPONENT}")
    exact = isinstance(base, int) and isinstance(exponent, int) and exponent > 0
    if exact and (base.bit_length() - 1) * exponent > MAX_RESULT_BITS:
        raise ValueError(f"result too large (more than about {MAX_INT_DIGITS:,} digits)")


def _bounded(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise ValueError(f"result too large (more than about {MAX_INT_DIGITS:,} digits)")
    return value


@function(defer=True, label="Calculator")
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression, such as "2 * (3 + 4) ** 2" or "sqrt(2) * pi".

    Args:
        expression: Numbers, + - * / // % ** (or ^), parentheses, pi, e, and functions
            such as sqrt, log, sin, round, min, max.
    """
    return repr(evaluate(expression))
