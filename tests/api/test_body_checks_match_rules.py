"""A check in a function's body of a parameter that also declares its rule (``Annotated[..., Range(...)]``) must state
the same bounds.

The declared rule runs first and is what the docstring is compared with (``test_documented_ranges.py``), so a body
check with stricter bounds is an undocumented second rule (``icl_regression.risk_mc`` was documented and declared
``n_prompts >= 1`` while its body refused 1; ``nearest_neighbor.a_Nd`` declared ``d >= 1`` and required ``d >= 4``),
and one with looser bounds is dead code that misleads a reader. This test reads every function of the packages
(``ast``, no import) and compares the bounds of ``check_int`` (``min_value``/``max_value``), ``check_positive``,
``check_nonneg`` and ``check_in_range`` calls on a parameter with that parameter's declared ``Range``; a planted
contradiction must be reported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dynamics", "closedform", "empirical", "figures")


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _declared(annotation: ast.expr) -> dict | None:
    """Bounds of the ``Range(...)`` inside an ``Annotated[...]`` annotation, or None."""
    for node in ast.walk(annotation):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "Range":
            return {k.arg: _literal(k.value) for k in node.keywords if k.arg in ("ge", "gt", "le", "lt")}
    return None


def _body_bounds(call: ast.Call) -> dict | None:
    """Bounds a ``check_*`` call enforces, or None for a check without bounds of this kind."""
    name, kw = call.func.id, {k.arg: k.value for k in call.keywords}
    if name == "check_int":
        out = {}
        if "min_value" in kw:
            out["ge"] = _literal(kw["min_value"])
        if "max_value" in kw:
            out["le"] = _literal(kw["max_value"])
        return out
    if name == "check_positive":
        return {"gt": 0}
    if name == "check_nonneg":
        return {"ge": 0}
    if name == "check_in_range" and len(call.args) >= 4:
        low_open = _literal(kw["low_open"]) if "low_open" in kw else False
        high_open = _literal(kw["high_open"]) if "high_open" in kw else False
        return {
            "gt" if low_open else "ge": _literal(call.args[2]),
            "lt" if high_open else "le": _literal(call.args[3]),
        }
    return None


def mismatches(source: str, label: str) -> list[str]:
    """``label:line function(parameter): declared ... body ...`` for every body check whose bounds differ."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        declared = {}
        for arg in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
            if arg.annotation is not None and "Annotated" in ast.unparse(arg.annotation):
                rule = _declared(arg.annotation)
                if rule is not None:
                    declared[arg.arg] = rule
        for node in ast.walk(fn):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id.startswith("check_")
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[1], ast.Name)
                and node.args[1].id == node.args[0].value in declared
            ):
                continue
            body = _body_bounds(node)
            rule = {k: v for k, v in declared[node.args[0].value].items() if v is not None}
            if body is not None and {k: v for k, v in body.items() if v is not None} != rule:
                out.append(f"{label}:{node.lineno} {fn.name}({node.args[0].value}): declared {rule} body {body}")
    return out


def test_body_checks_state_the_declared_bounds():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += mismatches(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "body checks that disagree with the declared rule:\n" + "\n".join(found)


def test_a_planted_contradiction_is_reported():
    planted = (
        "def f(n: Annotated[int, _V.Range(integer=True, ge=1)], q: Annotated[float, _V.Range(gt=0, lt=1)] = 0.5,"
        " m: Annotated[int, _V.Range(integer=True, ge=1)] = 1):\n"
        "    n = check_int('n', n, min_value=2)\n"
        "    q = check_in_range('q', q, 0.0, 1.0)\n"
        "    m = check_int('m', m, min_value=1)\n"
    )
    found = mismatches(planted, "planted")
    assert [line.split()[1] for line in found] == ["f(n):", "f(q):"]  # m agrees; n is stricter, q looser
