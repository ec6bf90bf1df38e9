"""The CA store that aiohttp loads at import, loaded at first use instead.

`aiohttp.connector` makes two SSL contexts at import, each parsing the system's CA
bundle (~17 ms of CPU apiece), which a sweep never uses. `defer_aiohttp_ca_load` makes
that import defer the two loads to the contexts' first use; the contexts and what they
verify are otherwise unchanged.

Design notes: docs/internals/kernel.md, `l0gc.process.tls`.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import ssl
import sys
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import importlib.abc

__all__ = ["DEFERRED_MODULE", "defer_aiohttp_ca_load", "deferred_ca_loads"]

DEFERRED_MODULE = "aiohttp.connector"
"""The module whose import-time contexts load their CA store at first use."""

_load_lock = threading.Lock()


class _DeferredCAContext(ssl.SSLContext):
    """An `ssl.SSLContext` whose default verify paths are not loaded yet: its first use
    loads them and makes it a plain `ssl.SSLContext` again. Only ever reached by
    assigning `__class__` (`_defer`): it adds no state, so the layouts agree."""

    def _load_deferred(self) -> None:
        with _load_lock:
            if type(self) is _DeferredCAContext:
                _REAL_SET_DEFAULT_VERIFY_PATHS(self)
                _retype(self, ssl.SSLContext)

    def set_default_verify_paths(self) -> None:
        self._load_deferred()

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self._load_deferred()
        return ssl.SSLContext.wrap_socket(self, *args, **kwargs)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self._load_deferred()
        return ssl.SSLContext.wrap_bio(self, *args, **kwargs)

    def get_ca_certs(self, binary_form: bool = False) -> Any:
        self._load_deferred()
        return ssl.SSLContext.get_ca_certs(self, binary_form)

    def cert_store_stats(self) -> dict[str, int]:
        self._load_deferred()
        return ssl.SSLContext.cert_store_stats(self)


def _retype(context: ssl.SSLContext, cls: type[ssl.SSLContext]) -> None:
    context.__class__ = cls


def _defer(self: ssl.SSLContext) -> None:
    """`SSLContext.set_default_verify_paths` while `deferred_ca_loads` is open."""
    if type(self) is ssl.SSLContext:
        _retype(self, _DeferredCAContext)
    else:  # a subclass of someone else's: leave it as it is
        _REAL_SET_DEFAULT_VERIFY_PATHS(self)


_REAL_SET_DEFAULT_VERIFY_PATHS = ssl.SSLContext.set_default_verify_paths


@contextlib.contextmanager
def deferred_ca_loads() -> Iterator[None]:
    """While open, a plain `ssl.SSLContext` told to load the default verify paths (as
    `ssl.create_default_context` does) loads them at its first use instead. Only for
    the duration of one import (`defer_aiohttp_ca_load`): not thread-safe with other
    code patching `ssl.SSLContext`."""
    name = "set_default_verify_paths"
    own = ssl.SSLContext.__dict__.get(name)  # None: inherited from _ssl._SSLContext
    setattr(ssl.SSLContext, name, _defer)
    try:
        yield
    finally:
        if own is None:
            delattr(ssl.SSLContext, name)  # exactly as it was
        else:
            setattr(ssl.SSLContext, name, own)


class _DeferringLoader:
    """The module's own loader, its `exec_module` run inside `deferred_ca_loads`."""

    def __init__(self, loader: importlib.abc.Loader, finder: _DeferringFinder) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            with deferred_ca_loads():
                self._loader.exec_module(module)
        finally:  # not in find_spec: the import system is iterating sys.meta_path then
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self._finder)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, ...: the real loader's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._loader, name)


class _DeferringFinder:
    """Finds `DEFERRED_MODULE` once, as the path finder does, with `_DeferringLoader`
    (which takes this finder off `sys.meta_path` once the module is loaded)."""

    def __init__(self) -> None:
        self.used = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != DEFERRED_MODULE or self.used:
            return None
        self.used = True
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None  # not a file on the path: found as the import system would
        spec.loader = cast("importlib.abc.Loader", _DeferringLoader(spec.loader, self))
        return spec


def defer_aiohttp_ca_load() -> None:
    """Make the process's first import of `aiohttp.connector` defer its two contexts'
    CA loads to their first use. A no-op once it is imported (or the hook is in)."""
    if DEFERRED_MODULE in sys.modules:
        return
    if any(isinstance(finder, _DeferringFinder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _DeferringFinder())
