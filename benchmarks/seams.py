"""Seams of the mutation check: named places where a mutant overspends, no source text edited.

Layer: adapter (benchmark; ``python -m benchmarks mutation``, docs/privacy.md P14). A mutant is
applied inside the pytest process that runs its tests (:mod:`benchmarks.mutation_plugin`), by
wrapping one *named* object of the product before any test module is imported:

:class:`Draws`
    every keyed discrete Laplace draw whose address (noise context, P2) holds the given labels
    in order is made at ¼ of the scale the code asked for — the scale a component passes to
    :meth:`KeyedNoise.discrete_laplace_at <dpsynth.noise.KeyedNoise.discrete_laplace_at>` or
    to its sparse form ``discrete_laplace_nonzero`` (P2c), so a spy on those methods sees the
    mutated scale, as it would see a wrong scale in the code;
:class:`Argument`
    one argument of a named function, method or class (a budget × 4, a scale × ¼), optionally
    only when its noise context holds given labels;
:class:`Result`
    the result of a named function, transformed;
:class:`Budget`
    one field of ``self.budget`` (a :class:`~dpsynth.online.block_budget.BlockBudget`) × 4
    while a named method runs — the share handed to a component at its point of use, while
    the accounting (``worst_case_loss``) still sees the documented split;
:class:`After`
    attributes of ``self`` (a counter's scale) transformed after a named method ran.

Loud by construction: a target that no longer exists raises :class:`SeamError` when the mutant
is applied, and every seam counts the values it changed (:data:`HITS`); the runner refuses a
mutant whose tests never reached its seam. Nothing here is imported by the product: the product
has no test hooks.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

#: Values changed by the applied seam in this process (the runner requires > 0).
HITS = [0]


class SeamError(RuntimeError):
    """A seam's target does not exist (renamed or moved): update benchmarks/mutants.py."""


def holds(context: Sequence[Any] | None, labels: Sequence[Any]) -> bool:
    """Whether ``context`` holds ``labels`` as a subsequence (in order, gaps allowed).

    >>> holds(("dpsynth", "partition", 0, "guided", "block", 3, "leaf"), ("guided", "leaf"))
    True
    >>> holds(("pmm", "level", 2), ("guided",))
    False
    """
    if context is None:
        return False
    items = iter(context)
    return all(any(item == label for item in items) for label in labels)


def _hit() -> None:
    HITS[0] += 1


def _resolve(target: str) -> tuple[Any, str, Any]:
    """``"package.module:Name.attr"`` → (owner, attribute name, the raw attribute)."""
    module_name, _, qualname = target.partition(":")
    try:
        owner: Any = importlib.import_module(module_name)
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        return owner, name, inspect.getattr_static(owner, name)
    except (ImportError, AttributeError, ValueError) as e:
        raise SeamError(f"seam {target!r} does not exist ({e}); the code moved: update the "
                        "mutant in benchmarks/mutants.py") from None


def _install(target: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
             everywhere: bool = False) -> None:
    """Replace ``target`` by ``wrap(original)``, keeping a static or class method's kind;
    ``everywhere``: also every ``from … import`` binding of it in modules loaded so far (later
    imports read the module's attribute, already replaced)."""
    owner, name, raw = _resolve(target)
    if isinstance(raw, staticmethod):
        setattr(owner, name, staticmethod(wrap(raw.__func__)))
        return
    if isinstance(raw, classmethod):
        setattr(owner, name, classmethod(wrap(raw.__func__)))
        return
    wrapped = wrap(raw)
    setattr(owner, name, wrapped)
    if everywhere:
        for module in list(sys.modules.values()):
            space = getattr(module, "__dict__", {})
            for key, value in list(space.items()):
                if value is raw and module is not owner:
                    space[key] = wrapped


@dataclass(frozen=True)
class Draws:
    """Every Lap_Z draw at an address holding ``labels`` in order, its scale × ``factor``
    (``form``: only the draws made in the dense form, ``discrete_laplace_at``, or only those
    made in the sparse form, ``discrete_laplace_nonzero``, P2c; None: both)."""

    labels: tuple[Any, ...]
    factor: float = 0.25
    form: str | None = None

    def describe(self) -> str:
        """For the table."""
        form = f" ({self.form} form)" if self.form else ""
        return f"draws at {'…'.join(map(str, self.labels))}{form}: scale × {self.factor:g}"

    def apply(self) -> None:
        """Every KeyedNoise made from now on draws through the mutated method."""
        from dpsynth.noise import KeyedNoise

        labels, factor, made = self.labels, self.factor, {}
        dense, sparse = self.form in (None, "dense"), self.form in (None, "sparse")

        def draw(noise, scale, context, streams, events):  # type: ignore[no-untyped-def]
            if dense and holds(context, labels):
                _hit()
                scale = scale * factor
            return super(type(noise), noise).discrete_laplace_at(scale, context, streams, events)

        def draw_nonzero(noise, scale, context, size):  # type: ignore[no-untyped-def]
            if sparse and holds(context, labels):  # the sparse form of the same draws (P2c)
                _hit()
                scale = scale * factor
            return super(type(noise), noise).discrete_laplace_nonzero(scale, context, size)

        def new(cls, *args, **kwargs):  # type: ignore[no-untyped-def]
            if cls not in made:  # a test's own subclass (a spy) is mutated the same way
                made[cls] = type(cls.__name__, (cls,), {
                    "__slots__": (), "discrete_laplace_at": draw,
                    "discrete_laplace_nonzero": draw_nonzero})
            return object.__new__(made[cls])

        KeyedNoise.__new__ = staticmethod(new)  # type: ignore[method-assign, assignment]


@dataclass(frozen=True)
class Argument:
    """``target``'s argument ``name`` replaced by ``change(value)``; with ``when``, only
    in calls whose argument ``context`` holds those labels; with ``only`` (a predicate on the
    argument's value and its description), only where it holds."""

    target: str
    name: str
    change: Callable[[Any], Any]
    label: str
    when: tuple[Any, ...] | None = None
    context: str = "context"
    everywhere: bool = False
    only: tuple[Callable[[Any], bool], str] | None = None

    def describe(self) -> str:
        """For the table."""
        where = f" when {self.context} holds {'…'.join(map(str, self.when))}" if self.when else ""
        where += f" and {self.only[1]}" if self.only else ""
        return f"`{self.target}` argument {self.name} {self.label}{where}"

    def apply(self) -> None:
        """Install the wrapper."""
        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            signature = inspect.signature(original)
            if self.name not in signature.parameters:
                raise SeamError(f"seam {self.target!r} has no argument {self.name!r}")

            def mutated(*args: Any, **kwargs: Any) -> Any:
                bound = signature.bind(*args, **kwargs)
                context = bound.arguments.get(self.context)
                if self.name in bound.arguments and (
                        self.when is None or holds(context, self.when)) and (
                        self.only is None or self.only[0](bound.arguments[self.name])):
                    _hit()
                    bound.arguments[self.name] = self.change(bound.arguments[self.name])
                return original(*bound.args, **bound.kwargs)
            return mutated
        _install(self.target, wrap, self.everywhere)


@dataclass(frozen=True)
class Result:
    """``target``'s result replaced by ``change(result, arguments)`` (None: leave it, not a
    hit; ``arguments`` by name)."""

    target: str
    change: Callable[[Any, dict[str, Any]], Any]
    label: str

    def describe(self) -> str:
        """For the table."""
        return f"`{self.target}` result {self.label}"

    def apply(self) -> None:
        """Install the wrapper."""
        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            signature = inspect.signature(original)

            def mutated(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                changed = self.change(result, dict(signature.bind(*args, **kwargs).arguments))
                if changed is None:
                    return result
                _hit()
                return changed
            return mutated
        _install(self.target, wrap)


@dataclass(frozen=True)
class Budget:
    """``self.budget.<share>`` × ``factor`` while ``target`` (a method) runs."""

    target: str
    share: str
    factor: float = 4.0

    def describe(self) -> str:
        """For the table."""
        return f"`{self.target}` runs with budget.{self.share} × {self.factor:g}"

    def apply(self) -> None:
        """Install the wrapper."""
        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def mutated(mechanism: Any, *args: Any, **kwargs: Any) -> Any:
                budget = mechanism.budget
                if not hasattr(budget, self.share):
                    raise SeamError(f"budget has no share {self.share!r}")
                _hit()
                mechanism.budget = replace(budget, **{
                    self.share: getattr(budget, self.share) * self.factor})
                try:
                    return original(mechanism, *args, **kwargs)
                finally:
                    mechanism.budget = budget
            return mutated
        _install(self.target, wrap)


@dataclass(frozen=True)
class After:
    """After ``target`` (a method) ran, each attribute of ``self`` × its factor."""

    target: str
    factors: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """For the table."""
        parts = ", ".join(f"{a} × {f:g}" for a, f in self.factors.items())
        return f"after `{self.target}`: {parts}"

    def apply(self) -> None:
        """Install the wrapper."""
        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def mutated(obj: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(obj, *args, **kwargs)
                for attribute, factor in self.factors.items():
                    if not hasattr(obj, attribute):
                        raise SeamError(f"{self.target!r} set no attribute {attribute!r}")
                    value = getattr(obj, attribute)
                    changed = value * factor
                    if isinstance(value, int) and float(changed).is_integer():
                        changed = int(changed)  # a count stays an integer
                    setattr(obj, attribute, changed)
                _hit()
                return result
            return mutated
        _install(self.target, wrap)


Seam = Draws | Argument | Result | Budget | After


def check(seam: Seam) -> None:
    """Raise :class:`SeamError` unless ``seam``'s target (and argument) exist — without
    applying it (the runner checks every mutant before it starts)."""
    target = getattr(seam, "target", None)
    if target is None:
        return
    owner, name, raw = _resolve(target)
    function = getattr(raw, "__func__", raw)
    if isinstance(seam, Argument) and seam.name not in inspect.signature(function).parameters:
        raise SeamError(f"seam {target!r} has no argument {seam.name!r}; update the mutant")


def times(factor: float) -> Callable[[Any], Any]:
    """``value × factor`` (for :class:`Argument`)."""
    return lambda value: value * factor
