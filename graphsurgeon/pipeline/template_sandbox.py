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
* the whole render may allocate at most ``MAX_ALLOCATED`` characters or items through these operations, the
  ``replace`` and ``join`` filters and string concatenation (``~``) together: a loop that builds many values,
  each under ``MAX_ITEMS``, is stopped by their sum (a ``replace`` filter once built 2.4 GB from values that
  each passed, and a doubling ``~`` in a loop 2 GB); ``replace`` and ``join`` predict their result's size
  before building it;
* the rendered text may be at most ``MAX_OUTPUT`` bytes, and rendering takes at most ``TIME_LIMIT`` seconds
  (a SIGALRM timer, set only in the main thread, where gsurg runs).

Every refusal, and every error the template raises while rendering (``1/0``, a recursive macro's
``RecursionError``), is a ``TemplateLimit`` or the template's own exception for ``side_files`` to report
as one line naming the template.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
import os
import re
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jinja2
from jinja2.compiler import CodeGenerator, Frame
from jinja2.loaders import split_template_path
from jinja2.nodes import Concat
from jinja2.sandbox import ImmutableSandboxedEnvironment

from graphsurgeon.errors import GsurgError

#: The most characters or items one value a template makes may hold, and the largest integer argument.
MAX_ITEMS = 1 << 24
#: The most characters or items one render may allocate through the checked operations, all together.
MAX_ALLOCATED = 1 << 26
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


class _Budget:
    """What one render has allocated so far through the checked operations."""

    def __init__(self) -> None:
        self.spent = 0

    def debit(self, n: int, what: str) -> None:
        if n > MAX_ITEMS:
            raise TemplateLimit(f"{what} would make a value longer than {MAX_ITEMS}")
        self.spent += n
        if self.spent > MAX_ALLOCATED:
            raise TemplateLimit(
                f"the template allocated more than {MAX_ALLOCATED} characters or items in all ({what})"
            )


_budget: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("template_budget", default=None)


def _debit(n: int, what: str) -> None:
    budget = _budget.get()
    if budget is None:  # outside ``render`` (a template rendered by hand): the per-value bound alone
        if n > MAX_ITEMS:
            raise TemplateLimit(f"{what} would make a value longer than {MAX_ITEMS}")
        return
    budget.debit(n, what)


def _replaced_size(text: str, old: Any, new: Any, count: Any = -1) -> int:
    """The length ``text.replace(old, new, count)`` would have, computed without building it."""
    if not isinstance(old, str) or not isinstance(new, str):
        return len(text)
    hits = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * (len(new) - len(old))


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
        widths = [v for v in (*args, *kwargs.values()) if isinstance(v, int) and not isinstance(v, bool)]
        _debit(max([len(owner), *widths]), name)
    elif name == "replace" and len(args) >= 2:
        _debit(_replaced_size(owner, *args[:3]), "replace")


def _mul(a: Any, b: Any) -> Any:
    for seq, n in ((a, b), (b, a)):
        if _size(seq) and isinstance(n, int) and _size(seq) * max(n, 0) > MAX_ITEMS:
            raise TemplateLimit(f"repeating a value of length {_size(seq)} {n} times (beyond {MAX_ITEMS})")
    result = a * b
    _debit(_size(result), "*")
    return result


def _pow(a: Any, b: Any) -> Any:
    if isinstance(b, int | float) and abs(b) > _MAX_EXPONENT:
        raise TemplateLimit(f"the exponent {b} is beyond {_MAX_EXPONENT}")
    if isinstance(a, int) and isinstance(b, int) and b > 0 and a.bit_length() * b > MAX_ITEMS:
        raise TemplateLimit(f"{a} ** {b} is beyond {MAX_ITEMS} bits")
    return a**b


def _mod(a: Any, b: Any) -> Any:
    _check_widths(a)
    result = a % b
    _debit(_size(result), "%")
    return result


def _add(a: Any, b: Any) -> Any:
    if _size(a) + _size(b) > MAX_ITEMS:
        raise TemplateLimit(f"a value longer than {MAX_ITEMS}")
    _debit(_size(a) + _size(b), "+")
    return a + b


def _concat(parts: tuple[Any, ...]) -> str:
    """``a ~ b ~ ...``: jinja2's string join, with its result counted."""
    texts = [p if isinstance(p, str) else str(p) for p in parts]
    _debit(sum(map(len, texts)), "~")
    return "".join(texts)


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles ``~`` to the sandbox's counted join (jinja2 would call its own ``str_join``)."""

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


_BINOPS: dict[str, Callable[[Any, Any], Any]] = {"*": _mul, "**": _pow, "%": _mod, "+": _add}


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox with the bounds of the module docstring."""

    intercepted_binops = frozenset(_BINOPS)
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for name in (*_WIDTH_FILTERS, "format", "replace", "join"):
            if name in self.filters:
                self.filters[name] = _bounded_filter(self.filters[name], name)
        self.globals.pop("lipsum", None)  # lipsum(n) writes n paragraphs: no template needs it

    @staticmethod
    def bounded_concat(parts: tuple[Any, ...]) -> str:
        return _concat(parts)

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
        value = args[skip - 1] if len(args) >= skip else None
        if name == "format":
            _check_widths(value)
        elif name == "replace":
            if isinstance(value, str):
                _debit(_replaced_size(value, *args[skip : skip + 3]), "the filter replace")
        elif name == "join":
            if isinstance(value, list | tuple):
                glue = args[skip] if len(args) > skip and isinstance(args[skip], str) else ""
                size = sum(len(v) if isinstance(v, str) else 32 for v in value) + len(glue) * len(value)
                _debit(size, "the filter join")
        else:
            _check_args(f"the filter {name}", args[skip:], kwargs)
        result = fn(*args, **kwargs)
        if name not in ("replace", "join"):
            _debit(_size(result), f"the filter {name}")
        return result

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
    token = _budget.set(_Budget())
    try:
        with _time_limit(TIME_LIMIT):
            for chunk in template.generate(**context):
                total += len(chunk)
                if total > MAX_OUTPUT:
                    raise TemplateLimit(f"the rendered text is longer than {MAX_OUTPUT} bytes")
                parts.append(chunk)
    finally:
        _budget.reset(token)
    return "".join(parts)
