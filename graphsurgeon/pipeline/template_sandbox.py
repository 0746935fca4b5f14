"""Rendering a side-file template written by whoever wrote the rule file: no code, bounded work.

A template is data, not a program the user chose to run, so it is rendered in jinja2's
``ImmutableSandboxedEnvironment`` (no attribute starting with ``_``, no method that changes a value, no
unsafe callable: ``cycler.__init__.__globals__`` is refused) with bounds on what it can make:

* ``*``, ``**``, ``%`` and ``+`` are checked before they run: a repeated string or list, a formatted
  string or a sum longer than ``MAX_ITEMS`` (characters or items) is refused, and ``**`` takes an exponent
  of at most 64 in magnitude on numbers whose result stays under ``MAX_ITEMS`` bits;
* a string method or filter that pads or repeats (``ljust``, ``rjust``, ``center``, ``zfill``,
  ``expandtabs``, ``replace``; the filters ``center``, ``indent``, ``wordwrap``, ``truncate``) is refused
  a width beyond ``MAX_ITEMS`` or a result that long, and so is a ``%``/``format`` width or precision;
* the rendered text may be at most ``MAX_OUTPUT`` bytes, and rendering takes at most ``TIME_LIMIT`` seconds
  (a SIGALRM timer, set only in the main thread, where gsurg runs).

Every refusal, and every error the template raises while rendering (``1/0``, a recursive macro's
``RecursionError``), is a ``TemplateLimit`` or the template's own exception for ``side_files`` to report
as one line naming the template.
"""

from __future__ import annotations

import contextlib
import operator
import os
import re
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jinja2
from jinja2.loaders import split_template_path
from jinja2.sandbox import ImmutableSandboxedEnvironment

from graphsurgeon.errors import GsurgError

#: The most characters or items one value a template makes may hold, and the largest integer argument.
MAX_ITEMS = 1 << 24
#: The most bytes a rendered template may hold.
MAX_OUTPUT = 64 << 20
#: The largest template file read.
MAX_TEMPLATE = 16 << 20
#: The most seconds rendering one template may take.
TIME_LIMIT = 10.0
_MAX_EXPONENT = 64
_WIDTH = re.compile(r"%[-#0 +]*(\d*)(?:\.(\d+))?|\{[^{}]*?:[^{}]*?(\d+)(?:\.(\d+))?[^{}]*\}")


class TemplateLimit(GsurgError):
    """A template that breaks a bound of the sandbox (or its time limit); ``side_files`` adds the side file
    and template to its message."""


def _size(value: Any) -> int:
    if isinstance(value, str | bytes | list | tuple | dict):
        return len(value)
    return 0


def _check_widths(fmt: Any) -> None:
    if not isinstance(fmt, str):
        return
    for m in _WIDTH.finditer(fmt):
        for digits in m.groups():
            if digits and int(digits) > MAX_ITEMS:
                raise TemplateLimit(f"a format width or precision of {digits} is beyond {MAX_ITEMS}")


#: String methods and filters whose integer arguments are widths (so their result is that long).
_WIDTH_METHODS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs"})
_WIDTH_FILTERS = frozenset({"center", "indent", "wordwrap", "truncate"})


def _check_args(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_ITEMS:
            raise TemplateLimit(f"{name} with a width of {value} (beyond {MAX_ITEMS})")


def _check_method(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if not isinstance(owner, str):
        return
    if name in _WIDTH_METHODS:
        _check_args(name, args, kwargs)
    elif name == "replace" and len(args) >= 2 and (len(owner) + 1) * (_size(args[1]) + 1) > MAX_ITEMS:
        raise TemplateLimit(f"replace could make a string longer than {MAX_ITEMS}")


def _mul(a: Any, b: Any) -> Any:
    for seq, n in ((a, b), (b, a)):
        if _size(seq) and isinstance(n, int) and _size(seq) * max(n, 0) > MAX_ITEMS:
            raise TemplateLimit(f"repeating a value of length {_size(seq)} {n} times (beyond {MAX_ITEMS})")
    return a * b


def _pow(a: Any, b: Any) -> Any:
    if isinstance(b, int | float) and abs(b) > _MAX_EXPONENT:
        raise TemplateLimit(f"the exponent {b} is beyond {_MAX_EXPONENT}")
    if isinstance(a, int) and isinstance(b, int) and b > 0 and a.bit_length() * b > MAX_ITEMS:
        raise TemplateLimit(f"{a} ** {b} is beyond {MAX_ITEMS} bits")
    return a**b


def _mod(a: Any, b: Any) -> Any:
    _check_widths(a)
    return a % b


def _add(a: Any, b: Any) -> Any:
    if _size(a) + _size(b) > MAX_ITEMS:
        raise TemplateLimit(f"a value longer than {MAX_ITEMS}")
    return a + b


_BINOPS: dict[str, Callable[[Any, Any], Any]] = {"*": _mul, "**": _pow, "%": _mod, "+": _add}


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox with the bounds of the module docstring."""

    intercepted_binops = frozenset(_BINOPS)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for name in (*_WIDTH_FILTERS, "format"):
            if name in self.filters:
                self.filters[name] = _bounded_filter(self.filters[name], name)

    def call_binop(self, context: jinja2.runtime.Context, operator_: str, left: Any, right: Any) -> Any:
        return _BINOPS.get(operator_, self.binop_table.get(operator_, operator.add))(left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        owner = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            _check_widths(owner)
            return wrapped(*args, **kwargs)

        return checked

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_method(__obj, args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)


def _bounded_filter(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` with its width arguments (or, for ``format``, the format's widths) checked first."""
    skip = 2 if hasattr(fn, "jinja_pass_arg") else 1  # the context or environment, then the value

    def bounded(*args: Any, **kwargs: Any) -> Any:
        if name == "format":
            _check_widths(args[skip - 1] if len(args) >= skip else None)
        else:
            _check_args(f"the filter {name}", args[skip:], kwargs)
        return fn(*args, **kwargs)

    for attr in ("jinja_pass_arg",):  # jinja2 passes the context/environment to filters marked so
        if hasattr(fn, attr):
            setattr(bounded, attr, getattr(fn, attr))
    return bounded


class _RegularFileLoader(jinja2.FileSystemLoader):
    """Loads only regular files of at most ``MAX_TEMPLATE`` bytes (not a FIFO, ``/dev/zero`` through a
    link, or a huge file)."""

    def get_source(self, environment: jinja2.Environment, template: str) -> Any:
        pieces = split_template_path(template)
        for folder in self.searchpath:
            path = os.path.join(folder, *pieces)
            if not os.path.exists(path):
                continue
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise TemplateLimit(f"template {path} is not a regular file")
            if st.st_size > MAX_TEMPLATE:
                raise TemplateLimit(f"template {path} is {st.st_size} bytes (at most {MAX_TEMPLATE})")
            break
        return super().get_source(environment, template)


def environment(folders: list[str]) -> BoundedSandbox:
    """A sandbox loading templates from ``folders`` (undefined names are errors)."""
    return BoundedSandbox(
        loader=_RegularFileLoader(folders),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise TemplateLimit(f"rendering took more than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def render(template: jinja2.Template, context: dict[str, Any]) -> str:
    """``template`` rendered with ``context`` within the bounds (``TemplateLimit`` otherwise)."""
    parts: list[str] = []
    total = 0
    with _time_limit(TIME_LIMIT):
        for chunk in template.generate(**context):
            total += len(chunk)
            if total > MAX_OUTPUT:
                raise TemplateLimit(f"the rendered text is longer than {MAX_OUTPUT} bytes")
            parts.append(chunk)
    return "".join(parts)
