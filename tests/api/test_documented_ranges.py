"""Each public callable's documented argument ranges equal the ranges its validation enforces.

The documented range of a parameter is read from the type line of its entry in the numpydoc ``Parameters`` section,
where the project states it in one machine-readable phrasing after the type: ``d : int >= 2``,
``eta : float > 0 or (n,) array``, ``quantile : float in (0, 1)``, ``level : float in (0, 1), optional`` (bounds
are numbers; a bound named by another parameter, ``power : float in (level, 1)``, is read as no bound on that side,
as the decorator cannot enforce it). The enforced range is the :class:`~dynamics.validation.Range` the decorator
applies to that parameter (an :class:`~dynamics.validation.Array`'s entry range counts too), read with
:func:`dynamics.validation.argument_rules`. A parameter matches when both give the same lower and upper bound, open
or closed, or neither gives one; an integer ``Range``'s implicit upper bound ``MAX_INT`` is not documented.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import pytest

from dynamics import validation as V
from dynamics.validation import Range, validated

#: The packages whose public callables are compared; the figures package contributes its public modules' callables.
PACKAGES = ("dynamics", "closedform", "empirical", "figures")

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![\w.*/])"
_BOUND = rf"(?:{_NUMBER}|[A-Za-z_][\w.*+-]*)"
#: ``>= 2``, ``> 0``, ``<= 1``, ``< 1`` (a comparison followed by a bound).
_CMP = re.compile(rf"(?<![\w<>=!])(>=|<=|>|<)\s*({_BOUND})")
#: ``in [0, 1)``, ``in (0, 2)``: an interval after the word ``in``.
_INTERVAL = re.compile(rf"\bin\s*([\[(])\s*({_BOUND})\s*,\s*({_BOUND})\s*([\])])")


def _number(text: str):
    """The bound as a number, or ``None`` for a symbolic bound (another parameter's name, ``inf``)."""
    if not re.fullmatch(_NUMBER, text):
        return None
    value = float(text)
    return int(value) if value.is_integer() else value


def documented_range(type_line: str) -> tuple:
    """``(lower, upper)`` stated in a parameter's type line, each ``(op, number)`` or ``None``.

    ``op`` is ``">"``/``">="`` for the lower and ``"<"``/``"<="`` for the upper bound. Raises ``ValueError`` when the
    line states two different lower (or upper) bounds.
    """
    lower, upper = set(), set()
    for m in _INTERVAL.finditer(type_line):
        lo, hi = _number(m.group(2)), _number(m.group(3))
        if lo is not None:
            lower.add((">" if m.group(1) == "(" else ">=", lo))
        if hi is not None:
            upper.add(("<" if m.group(4) == ")" else "<=", hi))
    for m in _CMP.finditer(_INTERVAL.sub(" ", type_line)):
        value = _number(m.group(2))
        if value is not None:
            (lower if m.group(1).startswith(">") else upper).add((m.group(1), value))
    if len(lower) > 1 or len(upper) > 1:
        raise ValueError(f"type line {type_line!r} states several bounds: {sorted(lower | upper)}")
    return (lower.pop() if lower else None, upper.pop() if upper else None)


def enforced_range(check) -> tuple:
    """``(lower, upper)`` of a decorator check, as :func:`documented_range` gives them (``(None, None)`` for checks
    without a numeric range)."""
    if isinstance(check, V.Array) or (check is not None and not isinstance(check, Range)):
        check = getattr(check, "range", None)  # an Array's entries; a check function's declared range
    if not isinstance(check, Range):
        return (None, None)
    lower = (">", check.gt) if check.gt is not None else ((">=", check.ge) if check.ge is not None else None)
    upper = ("<", check.lt) if check.lt is not None else ("<=", check.le) if check.le is not None else None
    if check.integer and upper == ("<=", V.MAX_INT):
        upper = None
    norm = lambda b: None if b is None else (b[0], _number(repr(b[1])) if isinstance(b[1], int | float) else b[1])  # noqa: E731
    return (norm(lower), norm(upper))


def parameter_types(doc: str | None) -> dict[str, str]:
    """``{name: type line}`` of the numpydoc ``Parameters`` section of ``doc`` (``a, b : float`` gives both)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    out: dict[str, str] = {}
    for i, line in enumerate(lines):
        if line.strip() == "Parameters" and i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}:
            indent = len(line) - len(line.lstrip())
            for entry in lines[i + 2 :]:
                if not entry.strip():
                    continue
                depth = len(entry) - len(entry.lstrip())
                if depth < indent or (depth == indent and set(entry.strip()) == {"-"}):
                    break
                if depth > indent:
                    continue  # a description line
                if re.fullmatch(r"\s*\w+\s*", entry) and entry.strip() in ("Returns", "Raises", "Yields"):
                    break
                names, sep, type_line = entry.partition(" : ")
                if not sep:
                    names, type_line = entry.rstrip(":"), ""
                for name in names.split(","):
                    out[name.strip().lstrip("*")] = type_line.strip()
            break
    return out


def mismatches(obj) -> list[str]:
    """The parameters of a callable whose documented and enforced ranges differ, each as a readable line."""
    rules = V.argument_rules(obj) or {}
    types = parameter_types(inspect.getdoc(obj))
    out = []
    for name in dict.fromkeys([*rules, *types]):
        enforced = enforced_range(rules.get(name))
        type_line = types.get(name, "")
        try:
            documented = documented_range(type_line)
        except ValueError as exc:
            out.append(f"{name}: {exc}")
            continue
        if documented != enforced:
            out.append(f"{name}: documented {_text(documented)} ({type_line!r}), enforced {_text(enforced)}")
    return out


def _text(bounds) -> str:
    parts = [f"{op} {value}" for op, value in (b for b in bounds if b is not None)]
    return " and ".join(parts) if parts else "no range"


def public_callables() -> list[str]:
    """``module.name`` of every public function and class defined in a public module of :data:`PACKAGES`."""
    names = []
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        modules = [package] + [
            m.name
            for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}.")
            if not any(part.startswith("_") for part in m.name.split("."))
        ]
        for module_name in modules:
            module = importlib.import_module(module_name)
            for name, obj in vars(module).items():
                if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
                    continue
                if (inspect.isclass(obj) and not issubclass(obj, BaseException)) or inspect.isfunction(obj):
                    names.append(f"{module_name}.{name}")
                elif callable(obj) and hasattr(obj, "__wrapped__"):
                    names.append(f"{module_name}.{name}")
    return names


def _resolve(qualname: str):
    module_name, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


@pytest.fixture(scope="module")
def callables() -> list[str]:
    return public_callables()


def test_every_public_callable_documents_the_ranges_it_enforces(callables):
    bad = [f"{q}: {line}" for q in callables for line in mismatches(_resolve(q))]
    assert not bad, "documented and enforced ranges differ:\n" + "\n".join(bad)


def test_the_comparison_sees_the_packages(callables):
    """Guards the enumeration: a walk that found no modules, or rules that read as empty, would pass vacuously."""
    ranged = [
        q
        for q in callables
        if any(enforced_range(c) != (None, None) for c in (V.argument_rules(_resolve(q)) or {}).values())
    ]
    assert len(callables) > 300 and len(ranged) > 150, (len(callables), len(ranged))
    assert {q.split(".")[0] for q in ranged} == set(PACKAGES)


@validated(n=Range(integer=True, ge=2))
def _planted(n: int, lam: float = 1.0):
    """A function whose docstring contradicts its rule.

    Parameters
    ----------
    n : int >= 1
    lam : float > 0
    """
    return n * lam


@validated(n=Range(integer=True, ge=2), lam=Range(gt=0, le=1))
def _agreeing(n: int, lam: float = 1.0):
    """The same function with matching ranges.

    Parameters
    ----------
    n : int >= 2
        Count.
    lam : float in (0, 1], optional
        Rate.
    """
    return n * lam


def test_a_planted_contradiction_is_rejected():
    assert mismatches(_planted) == [
        "n: documented >= 1 ('int >= 1'), enforced >= 2",
        "lam: documented > 0 ('float > 0'), enforced no range",
    ]
    assert mismatches(_agreeing) == []


def test_an_undocumented_range_is_rejected():
    @validated(x=Range(ge=0))
    def undocumented(x):
        """No parameter section."""

    assert mismatches(undocumented) == ["x: documented no range (''), enforced >= 0"]


@pytest.mark.parametrize(
    "line, bounds",
    [
        ("int >= 2", ((">=", 2), None)),
        ("float > 0 or (n,) array, optional", ((">", 0), None)),
        ("float in (0, 1)", ((">", 0), ("<", 1))),
        ("float in [0, 1), optional", ((">=", 0), ("<", 1))),
        ("array_like float64 in [-1, 1]", ((">=", -1), ("<=", 1))),
        ("float in (level, 1)", (None, ("<", 1))),  # a bound named by another parameter is not enforceable
        ("int >= 2*K", (None, None)),
        ("int in [1, D]", ((">=", 1), None)),
        ("float >= 1e-3", ((">=", 0.001), None)),
        ("(n, d) float64", (None, None)),
        ("", (None, None)),
    ],
)
def test_documented_range_reads_the_phrasings(line, bounds):
    assert documented_range(line) == bounds


def test_two_different_bounds_on_one_side_are_refused():
    with pytest.raises(ValueError, match="several bounds"):
        documented_range("float > 0 or array >= 1")


def test_enforced_range_reads_specs():
    assert enforced_range(Range(integer=True, ge=1)) == ((">=", 1), None)  # the implicit MAX_INT is not documented
    assert enforced_range(Range(gt=0, lt=1.5)) == ((">", 0), ("<", 1.5))
    assert enforced_range(V.Array(ndim=1, range=Range(ge=0))) == ((">=", 0), None)
    assert enforced_range(V.OneOf("a", "b")) == (None, None)
    assert enforced_range(None) == (None, None)


def test_zero_steps_return_the_initial_state():
    """``n_steps = 0`` is documented (and accepted by the bodies) for both maps; the rule once refused it."""
    import numpy as np

    from closedform import icl_regression as icl
    from closedform import single_location as sl

    state0 = np.array([0.1, 0.2, 0.0, 0.0, 0.3])
    traj = sl.map(sl.SingleLocationTask(d=8, L=4), state0, alpha=0.1, n_steps=0, lam=0.5)
    assert traj.sizes["time"] == 1 and traj["kappa"].item() == 0.1 and traj["rho"].item() == 0.3
    task = icl.ICLRegressionTask(d=4, L=8, sigma2=0.1)
    traj = icl.map(task, np.array([0.1, 0.2]), np.array([0.3, -0.3]), lr=0.1, n_steps=0)
    assert traj.sizes["time"] == 1 and traj["omega_0"].item() == 0.1 and traj["mu_1"].item() == -0.3


if __name__ == "__main__":  # pragma: no cover
    total = 0
    for q in public_callables():
        bad = mismatches(_resolve(q))
        total += len(bad)
        for b in bad:
            print(f"{q}: {b}")
    print("total", total)


def _bottom_overrides(root) -> list[str]:
    """``validate_module(...)`` calls that pass rules (``per_function=`` or a rule by parameter name) instead of
    leaving each rule at its parameter's definition; ``skip=`` only names callables left alone."""
    import ast

    hits = []
    for path in sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")):
        if path.name == "validation.py" and path.parent.name == "dynamics":
            continue  # the definition of validate_module itself
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            name = getattr(func, "id", None) or getattr(func, "attr", None)
            if isinstance(node, ast.Call) and name == "validate_module":
                extra = [k.arg for k in node.keywords if k.arg != "skip"]
                if extra:
                    hits.append(f"{path.relative_to(root)}:{node.lineno} {extra}")
    return hits


def test_rules_are_declared_at_the_definitions_only(callables):
    """One source of truth: no module overrides its rules from the bottom, and the figure framework's checked
    callables (whose rules moved into their signatures) are among those compared above."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert not _bottom_overrides(root)
    for name in ("registry.CheckResult", "registry.compare_rows", "registry.per_seed_check", "report.build_report"):
        assert f"figures.{name}" in callables


def test_a_bottom_override_is_found(tmp_path):
    """The scan above can fail: a planted module with a ``per_function`` override is named, a plain call is not."""
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "probe.py").write_text(
        "validate_module(globals(), skip=('A',))\n_V.validate_module(globals(), per_function={'f': {}})\n"
    )
    assert _bottom_overrides(tmp_path) == ["figures/probe.py:2 ['per_function']"]
