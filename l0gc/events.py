"""How the instrumentation hooks receive events: routing, once per event class.

Design notes: docs/internals/kernel.md, `l0gc.events`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Emitter",
    "HandlerTable",
    "Hook",
    "Hooks",
    "RoutedHook",
    "route",
]

Hook = Callable[[Any], None]
"""Called with each event (typed `Any` so a hook for one event class fits)."""


@runtime_checkable
class RoutedHook(Protocol):
    """A hook that takes only some event classes: `handlers[type(event)](event)`."""

    @property
    def handlers(self) -> Mapping[type, Hook]:
        """The callable for each event class this hook takes."""

    def __call__(self, event: Any) -> None:
        """Take any event (those without a handler are ignored)."""


Hooks = Hook | tuple[Hook, ...] | None
"""What a shell takes: one hook, several, or none."""


def _fan_out(handlers: tuple[Hook, ...], event: Any) -> None:
    for handler in handlers:
        handler(event)


def route(hooks: Hooks, kind: type) -> Hook | None:
    """The one callable to call with events of class `kind`, or None if no hook takes them.

    A `RoutedHook` contributes its handler for `kind` (if any); any other callable
    contributes itself. Several contributors are called in order.
    """
    return _route(_contributors(hooks), kind)


_Contributor = tuple[Hook, "Mapping[type, Hook] | None"]


def _contributors(hooks: Hooks) -> tuple[_Contributor, ...]:
    """Each hook with its handler table if it is a `RoutedHook` (a runtime Protocol check
    costs tens of microseconds, so an `Emitter` does it once per hook, not per class)."""
    if hooks is None:
        return ()
    return tuple(
        (hook, hook.handlers if isinstance(hook, RoutedHook) else None)
        for hook in (hooks if isinstance(hooks, tuple) else (hooks,))
    )


def _route(contributors: tuple[_Contributor, ...], kind: type) -> Hook | None:
    handlers: list[Hook] = []
    for hook, table in contributors:
        if table is not None:
            handler = table.get(kind)
            if handler is not None:
                handlers.append(handler)
        else:
            handlers.append(hook)
    if not handlers:
        return None
    if len(handlers) == 1:
        return handlers[0]
    fanned = tuple(handlers)
    return lambda event: _fan_out(fanned, event)


class HandlerTable:
    """A `RoutedHook` made of a fixed table: event class -> handler (the base of every
    instrumentation backend)."""

    __slots__ = ("_handlers",)

    def __init__(self, handlers: Mapping[type, Hook]) -> None:
        self._handlers = dict(handlers)

    @property
    def handlers(self) -> Mapping[type, Hook]:
        """The handler of each event class this hook takes."""
        return self._handlers

    def __call__(self, event: Any) -> None:
        """Hand `event` to its class's handler; ignore it if it has none."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)


class Emitter:
    """A shell's side of the hooks: `route` resolved once for each event class it emits,
    then one dictionary lookup per event (nothing is called when no hook takes it)."""

    __slots__ = ("_routes",)

    def __init__(self, hooks: Hooks, kinds: Iterable[type]) -> None:
        contributors = _contributors(hooks)
        self._routes = {kind: _route(contributors, kind) for kind in kinds}

    def route_of(self, kind: type) -> Hook | None:
        """The resolved callable for `kind` (for a hot path that binds it once)."""
        return self._routes[kind]

    def __call__(self, event: Any) -> None:
        """Emit `event` (its class must be one of the shell's)."""
        handler = self._routes[type(event)]
        if handler is not None:
            handler(event)
