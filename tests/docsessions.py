"""Console sessions of the docs: extracting them, and matching shown output with real output.

The pure half of the docs-that-run harness (tests/test_docs_sessions.py runs the sessions
against real local servers). The conventions it implements are the ones written for doc
authors in docs/conventions.md; in short:

- A session is a fenced block tagged `console`, or any fenced block whose first line that
  is not a `#` comment starts with `$ `. A `$ ` line is a command (a trailing `\\` continues
  it on the next line); the lines after it, up to the next command or narration, are its
  shown output.
- Narration: a line starting with `#` at the top of the block, or right after a blank
  line or another narration line. `# in another terminal: COMMAND` starts COMMAND in the
  background (a server the session talks to), with the session's environment and
  directory, stopped by its PID when the session ends.
- An HTML comment on the line before the fence marks the block: `<!-- not run: REASON -->`
  (illustrative only; the reason is required) or `<!-- session setup: NAME -->` (the
  harness first writes the state named NAME).
- Shown output matches real output line by line, except:
  * a line that is only `...` stands for any number of lines (also none), and `...`
    inside a line for any text;
  * `~N` (a number written with a tilde) matches any number;
  * values that differ on every run match any value of their kind (`VARIABLE_KINDS`):
    ids and tokens, timestamps and ages, durations, ports, etcd revisions. A token shown
    in one output and used in a later command is replaced in that command by the value
    the real output had in its place.
- Trailing whitespace and trailing blank lines are ignored; everything else must be equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BACKGROUND_PREFIX",
    "VARIABLE_KINDS",
    "DocFormatError",
    "Mismatch",
    "Session",
    "Step",
    "extract_sessions",
    "match_output",
    "numbered",
    "sessions_of",
    "substitute",
]

BACKGROUND_PREFIX = "# in another terminal: "
_FENCE = re.compile(r"^(?P<indent> {0,4})```(?P<lang>[\w-]*)\s*$")
# Loose on purpose: a misspelt marker (`not-run`, `skip`, `setup:`) is an error, not ignored.
_MARKER = re.compile(
    r"^\s*<!--\s*(?P<body>(?:not[\s_-]*run|no[\s_-]*run|skip|session|setup)\b.*?)\s*-->\s*$",
    re.IGNORECASE,
)
_NOT_RUN = re.compile(r"not run:\s*(?P<reason>\S.*)")
_SETUP = re.compile(r"session setup:\s*(?P<name>[\w-]+)")
_SESSION_LANGS = {"console", "sh", "shell", "bash", ""}


class DocFormatError(ValueError):
    """A console session or its marker is written against the conventions."""


@dataclass(frozen=True, slots=True)
class Step:
    """One command of a session with its shown output (`background`: a server it starts)."""

    line: int
    command: str
    expected: tuple[str, ...] = ()
    background: bool = False


@dataclass(frozen=True, slots=True)
class Session:
    """One console block of a doc, in order, with its marker."""

    doc: str
    line: int
    steps: tuple[Step, ...]
    setup: str | None = None
    not_run: str | None = None

    @property
    def name(self) -> str:
        """`doc.md:LINE` of the opening fence."""
        return f"{self.doc}:{self.line}"


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Why shown and real output differ: the first shown line that could not be matched."""

    expected_line: int  # index into the shown lines, or len(shown) when real output has more
    reason: str


# -- extraction -----------------------------------------------------------------------------


def sessions_of(paths: Iterable[Path], root: Path) -> list[Session]:
    """Every console session of the given Markdown files, named relative to `root`."""
    found: list[Session] = []
    for path in paths:
        found.extend(extract_sessions(path.read_text(encoding="utf-8"), path.relative_to(root)))
    return found


def extract_sessions(markdown: str, doc: str | Path) -> list[Session]:
    """The console sessions of one Markdown text (see the module docstring for the rules)."""
    lines = markdown.splitlines()
    sessions: list[Session] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = len(opening.group("indent"))
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [
            line[indent:] if line[:indent].strip() == "" else line
            for line in lines[index + 1 : end]
        ]
        lang = opening.group("lang")
        if lang == "console" or (lang in _SESSION_LANGS and _starts_with_prompt(body)):
            where = f"{doc}:{index + 1}"
            setup, not_run = _marker(lines, index, where)
            steps = _steps(body, index + 2, where)
            sessions.append(Session(str(doc), index + 1, steps, setup, not_run))
        index = end + 1
    return sessions


def _starts_with_prompt(body: list[str]) -> bool:
    for line in body:
        if line.strip() and not line.startswith("#"):
            return line.startswith("$ ")
    return False


def _marker(lines: list[str], fence: int, where: str) -> tuple[str | None, str | None]:
    """(setup name, not-run reason) from the HTML comments right above the fence."""
    setup: str | None = None
    not_run: str | None = None
    above = fence - 1
    while above >= 0 and not lines[above].strip():
        above -= 1
    while above >= 0 and (marker := _MARKER.match(lines[above])):
        body = marker.group("body")
        if (found := _NOT_RUN.fullmatch(body)) is not None:
            not_run = found.group("reason")
        elif (named := _SETUP.fullmatch(body)) is not None:
            setup = named.group("name")
        else:
            raise DocFormatError(
                f"{where}: marker <!-- {body} --> is neither '<!-- not run: REASON -->' nor "
                "'<!-- session setup: NAME -->'; write one of those (a reason is required)"
            )
        above -= 1
    return setup, not_run


def _steps(body: list[str], first_line: int, where: str) -> tuple[Step, ...]:
    steps: list[Step] = []
    command: list[str] | None = None
    command_line = 0
    output: list[str] = []
    narration_allowed = True  # at the top, after a blank line, after narration
    continuing = False

    def finish() -> None:
        nonlocal command, output
        if command is not None:
            while output and not output[-1].strip():
                output.pop()
            steps.append(Step(command_line, "\n".join(command), tuple(output)))
        command, output = None, []

    for offset, line in enumerate(body):
        number = first_line + offset
        if continuing and command is not None:
            command.append(line.removeprefix("> "))
            continuing = line.endswith("\\")
            continue
        if line.startswith("$ "):
            finish()
            command, command_line = [line[2:]], number
            continuing = line.endswith("\\")
            narration_allowed = False
        elif line.startswith("#") and narration_allowed:
            finish()
            if line.startswith(BACKGROUND_PREFIX):
                steps.append(Step(number, line[len(BACKGROUND_PREFIX) :].strip(), background=True))
        elif command is None:
            if line.strip():
                raise DocFormatError(
                    f"{where}: line {number} is output before any `$ ` command: start the "
                    "block with a command, or narrate with a `#` line"
                )
            narration_allowed = True
        else:
            output.append(line.rstrip())
            narration_allowed = not line.strip()
    finish()
    if not any(not step.background for step in steps):
        raise DocFormatError(f"{where}: a console block without any `$ ` command")
    return tuple(steps)


# -- matching -------------------------------------------------------------------------------

_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"


@dataclass(frozen=True, slots=True)
class _Kind:
    """Values that differ between runs: `shown` finds them in shown output, `real` matches."""

    name: str
    shown: str
    real: str
    bind: bool = False  # a token a later command may use


VARIABLE_KINDS: tuple[_Kind, ...] = (
    _Kind(
        "uuid",
        r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        bind=True,
    ),
    _Kind("token", r'(?<="token": ")[A-Za-z0-9_~+/=.-]+(?=")', r"[A-Za-z0-9_~+/=.-]+", bind=True),
    _Kind(
        "hex id",
        r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{12,}\b",
        r"[0-9a-f]{12,}",
        bind=True,
    ),
    _Kind(
        "ISO time",
        r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?",
        r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?",
    ),
    _Kind("unix time", r"\b1[5-9]\d{8}(?:\.\d+)?\b", r"1[5-9]\d{8}(?:\.\d+)?"),
    _Kind("port", r"(?<=127\.0\.0\.1:)\d+\b|(?<=localhost:)\d+\b", r"\d+"),
    _Kind("etcd revision", r'(?<=revision )\d+\b|(?<=revision": )\d+\b', r"\d+"),
    _Kind("duration field", rf'(?<=_s": ){_NUMBER}', _NUMBER),
    _Kind(
        "duration", r"\b\d+(?:\.\d+)?\s?(?:ms|us|s|m|h|d)\b", r"\d+(?:\.\d+)?\s?(?:ms|us|s|m|h|d)"
    ),
)
_ELLIPSIS = r"\.\.\."
_ABOUT = rf"~{_NUMBER}"
_SHOWN = re.compile(
    "|".join(
        [f"(?P<ellipsis>{_ELLIPSIS})", f"(?P<about>{_ABOUT})"]
        + [f"(?P<k{index}>{kind.shown})" for index, kind in enumerate(VARIABLE_KINDS)]
    )
)


@dataclass(slots=True)
class _Line:
    """One shown line as a regex, with the tokens it captures (group name -> shown value)."""

    pattern: re.Pattern[str]
    captures: dict[str, str] = field(default_factory=dict)


def _compile(shown: str, bound: Mapping[str, str]) -> _Line:
    parts: list[str] = []
    captures: dict[str, str] = {}
    position = 0
    for found in _SHOWN.finditer(shown):
        parts.append(re.escape(shown[position : found.start()]))
        position = found.end()
        group = found.lastgroup
        assert group is not None
        if group == "ellipsis":
            parts.append(".*?")
        elif group == "about":
            parts.append(_NUMBER)
        else:
            kind = VARIABLE_KINDS[int(group[1:])]
            value = found.group()
            if kind.bind and value in bound:
                parts.append(re.escape(bound[value]))  # the same token again: the same value
            elif kind.bind:
                name = f"t{len(captures)}"
                captures[name] = value
                parts.append(f"(?P<{name}>{kind.real})")
            else:
                parts.append(f"(?:{kind.real})")
    parts.append(re.escape(shown[position:]))
    return _Line(re.compile("".join(parts)), captures)


def match_output(
    shown: Iterable[str], real: Iterable[str], bound: Mapping[str, str] | None = None
) -> dict[str, str] | Mismatch:
    """Match real output lines against shown ones; the new token bindings, or why not.

    `bound` maps tokens shown in earlier outputs to their real values; the result adds the
    tokens this output shows (shown value -> real value).
    """
    known = dict(bound or {})
    expected = _trimmed(shown)
    actual = _trimmed(real)
    compiled: list[_Line | None] = [
        None if line.strip() == "..." else _compile(line, known) for line in expected
    ]
    furthest = _Furthest()
    result = _match(compiled, actual, 0, 0, {}, furthest)
    if result is not None:
        return result
    return Mismatch(furthest.line, furthest.reason)


def _trimmed(lines: Iterable[str]) -> list[str]:
    out = [line.rstrip() for line in lines]
    while out and not out[-1]:
        out.pop()
    return out


@dataclass(slots=True)
class _Furthest:
    """The furthest shown line any attempt reached, and why it failed there."""

    line: int = 0
    reason: str = ""

    def note(self, line: int, reason: str) -> None:
        if line >= self.line:
            self.line, self.reason = line, reason


def _match(
    lines: list[_Line | None],
    actual: list[str],
    at_line: int,
    at_actual: int,
    captured: dict[str, str],
    furthest: _Furthest,
) -> dict[str, str] | None:
    """The captured tokens, or None (see `furthest`); recurses only at `...` lines."""
    captured = dict(captured)
    while at_line < len(lines) and (line := lines[at_line]) is not None:
        if at_actual == len(actual):
            furthest.note(at_line, "real output ended before this line")
            return None
        matched = line.pattern.fullmatch(actual[at_actual])
        if matched is None:
            furthest.note(at_line, f"real line is {actual[at_actual]!r}")
            return None
        for group, shown in line.captures.items():
            real = matched.group(group)
            if captured.setdefault(shown, real) != real:
                furthest.note(at_line, f"{shown!r} stood for {captured[shown]!r}, now {real!r}")
                return None
        at_line, at_actual = at_line + 1, at_actual + 1
    if at_line == len(lines):
        if at_actual == len(actual):
            return captured
        furthest.note(at_line, f"real output goes on with: {actual[at_actual]!r}")
        return None
    for skip in range(at_actual, len(actual) + 1):  # a `...` line: try every length
        found = _match(lines, actual, at_line + 1, skip, captured, furthest)
        if found is not None:
            return found
    return None


def substitute(command: str, table: Mapping[str, str]) -> str:
    """`command` with every key of `table` replaced by its value, longest key first."""
    if not table:
        return command
    keys = sorted(table, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(key) for key in keys))
    return pattern.sub(lambda found: table[found.group()], command)


def numbered(lines: Iterable[str], start: int = 0) -> Iterator[str]:
    """Lines prefixed with their index, for failure messages."""
    for index, line in enumerate(lines, start):
        yield f"{index:3d} | {line}"
