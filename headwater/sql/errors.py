"""Errors of headwater's SQL front end, positioned at the offending token.

A user fixes a query faster when the message says where the problem is, so
every error of the parser, the planner and the executor is a :class:`SqlError`
carrying a 1-based line and column (where the offending token starts).
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import Token


class SqlError(ValueError):
    """A query headwater cannot run; carries the position of the offending token."""

    def __init__(
        self, message: str, line: int | None = None, col: int | None = None, hint: str = ""
    ) -> None:
        self.message, self.line, self.col, self.hint = message, line, col, hint
        super().__init__(_render(message, line, col, hint))


def _render(message: str, line: int | None, col: int | None, hint: str) -> str:
    """``line 3, column 12: <message>. <hint>``, without the parts that are unknown."""
    where = ""
    if line is not None:
        where = f"line {line}, column {col}: " if col is not None else f"line {line}: "
    return f"{where}{message}. {hint}" if hint else f"{where}{message}"


def _start(line: int, col: int, start: int, end: int) -> tuple[int, int]:
    """sqlglot records the column where a token *ends*; users expect where it starts."""
    return line, max(1, col - (end - start))


def token_position(token: Token) -> tuple[int, int]:
    """(line, col) where ``token`` starts."""
    return _start(token.line, token.col, token.start, token.end)


def position(node: exp.Expr) -> tuple[int | None, int | None]:
    """(line, col) of a parsed node: from its own meta or its first identifier's meta.

    Nodes such as columns or intervals carry no position of their own; their
    earliest positioned descendant (by offset in the text) stands for them.
    """
    if node.meta_get("line") is not None:
        meta = node.meta
    else:
        metas = [n.meta for n in node.walk() if n.meta_get("line") is not None]
        if not metas:
            return None, None
        meta = min(metas, key=lambda m: m.get("start", 0))
    return _start(meta["line"], meta["col"], meta.get("start", 0), meta.get("end", 0))
