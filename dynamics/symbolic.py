"""Symbolic front end: from a sympy risk (or map, or vector field) to compiled engine kernels and their derivatives.

A :class:`SymbolicModel` is built from sympy expressions in named state variables and parameters. From a risk
``R(x; p)`` (:meth:`SymbolicModel.from_risk`) it derives

* the gradient ``dR/dx`` and the Hessian ``d2R/dx2``;
* the gradient-descent map ``x' = x - alpha dR/dx`` and the gradient flow ``dx/dt = -dR/dx``, or their projected
  variants when groups of state variables live on unit spheres (a product of spheres): on a group ``u`` the map
  moves along the tangent part of the gradient, ``u - alpha (g - (u.g) u)``, and renormalises (projected gradient
  descent), and the flow is ``-(g - (u.g) u)`` (the Riemannian gradient flow);
* the Jacobians of the map and of the flow with respect to the state.

A model can also be given directly as a map or a vector field (``SymbolicModel(state, params, map=...)``), e.g. a
reduced map that is not a plain gradient step. Every expression is differentiated by sympy, its common
subexpressions are eliminated (``sympy.cse``) and it is printed as plain Python with ``math.*`` calls, which numba
compiles. The generated functions follow the engine contract (``step(k, x, p, out)`` for
:func:`dynamics.iterate`, ``rhs(t, x, p, out)`` for :func:`dynamics.integrate`) and are written to one module file
in the engine's kernel folder (``dynamics._kernels.kernel_dir()``), named by a SHA-256 of the model's expressions,
of the sources its special functions depend on, of this generator and of the numba/Python versions: numba's on-disk
cache then works across processes, a second process skips the sympy work entirely (it only imports the file and
loads the compiled code), and the engine imports the step function by name like a hand-written kernel.

Special functions: erf, erfc, exp, log, sqrt, trigonometric and hyperbolic functions print as their ``math``
counterparts. A model's own special function (e.g. zeta(t, g) = E erf(t + g Z)^2 of the single-location model) is
registered with :func:`numba_function`: a sympy ``Function`` whose value is computed by an existing numba function
and whose partial derivatives are given as sympy expressions (derivative rules), so that gradients, Jacobians and
Hessians of expressions that contain it are exact closed forms. A registered function may declare a
:class:`Precompute`: a table that depends on some of its arguments only (zeta's series coefficients depend on g).
Where those arguments are expressions of the parameters, the generator hoists the table out of the kernels: it is
built once per parameter row by the generated ``table(p, out)`` (:meth:`SymbolicModel.args`) and handed to the
kernels through the engine's ``args``, together with every other subexpression of the parameters alone. The kernels
check the table's key (the parameter values it was built from) against their own row and compute directly when it
differs, so a stale table never changes a result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import pathlib
import sys
from collections.abc import Sequence
from typing import Annotated

import numpy as np
import sympy
from sympy.printing.pycode import PythonCodePrinter

from dynamics import _kernels
from dynamics.validation import Range, validated

__all__ = ["Precompute", "SymbolicModel", "numba_function"]

_GENERATOR_FILE = pathlib.Path(__file__)
_MODULES: dict = {}
_MAX_PRODUCT_POWER = 8  # integer (and half-integer) powers up to this order are printed as products


# ----------------------------------------------------------------------------------------------------------------
# special functions backed by numba implementations


@validated
@dataclasses.dataclass(frozen=True)
class Precompute:
    """A table of a special function that depends on some of its arguments only, computed once per parameter row.

    When those arguments (``args``) are expressions of the parameters alone at a call site, the generated kernels
    receive the table through the engine's ``args`` channel (:meth:`SymbolicModel.args`) and evaluate the function
    from it; elsewhere they call the plain implementation.

    Parameters
    ----------
    build : numba ``@njit`` function
        ``build(*values, out, o)`` writes the table for the values of the arguments ``args`` (in that order) into
        ``out[o : o + size]``.
    evaluate : numba ``@njit`` function
        ``evaluate(*all_args, *shared_values, table, o)``: the function's value from the table at ``table[o:]``
        (built for the same values of ``args``), equal to the plain implementation up to rounding.
    size : int >= 1
        Floats in the table.
    args : tuple of int
        Indices (from 0) of the arguments the table depends on.
    shared : callable, optional
        ``shared(*all_args)`` returns sympy expressions that ``evaluate`` takes after the arguments (e.g. erf and exp
        of a scaled argument): they join the kernel's common subexpressions, so that values the rest of the model
        also needs are computed once.
    """

    build: object
    evaluate: object
    size: Annotated[int, Range(integer=True, ge=1)]
    args: tuple
    shared: object = None


def numba_function(name: str, impl, derivatives: Sequence, *, precompute: Precompute | None = None):
    """A sympy function ``name`` evaluated by the numba function ``impl``, with partial-derivative rules.

    Parameters
    ----------
    name : str
        The function's name in sympy expressions (a Python identifier).
    impl : numba ``@njit`` function
        Computes the value from float arguments; must be importable by its module and qualified name (defined at
        the top level of a module), since the generated kernel module imports it.
    derivatives : sequence of callables or None, one per argument
        ``derivatives[i](*args)`` returns the sympy expression of the partial derivative with respect to argument
        ``i`` at the sympy arguments ``args``; None where no rule exists (differentiating along that argument then
        raises ``ValueError``).
    precompute : Precompute, optional
        A table computed once per parameter row where the arguments it depends on are expressions of the
        parameters only (e.g. the series coefficients of zeta(t, g) at g = lambda gamma); the generated kernels
        then evaluate the function from it (see :class:`Precompute`, :meth:`SymbolicModel.args`).

    Returns
    -------
    A subclass of ``sympy.Function``; call it on sympy expressions (``zeta(t, g)``).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a Python identifier; got {name!r}")
    _kernels.check_model("impl", impl, "impl(*args) -> float")
    if not _kernels._importable(impl):
        raise ValueError(
            f"impl must be importable by name (a top-level function of a module); got "
            f"{impl.py_func.__module__}.{impl.py_func.__qualname__}"
        )
    nargs = impl.py_func.__code__.co_argcount
    derivatives = tuple(derivatives)
    if len(derivatives) != nargs:
        raise ValueError(
            f"derivatives must have one rule (or None) per argument of {name} ({nargs}); got {len(derivatives)}"
        )
    if precompute is not None:
        _check_precompute(precompute, nargs)

    def fdiff(self, argindex=1):
        rule = derivatives[argindex - 1]
        if rule is None:
            raise ValueError(f"no derivative rule for argument {argindex} of {name}: give one to numba_function")
        return rule(*self.args)

    attrs = {"nargs": nargs, "fdiff": fdiff, "_attndyn_impl": impl, "_attndyn_precompute": precompute}
    cls = type(name, (sympy.Function,), attrs)
    probe = sympy.symbols(f"_a0:{nargs}")
    cls._attndyn_key = (
        _qualified(impl),
        tuple("None" if r is None else sympy.srepr(r(*probe)) for r in derivatives),
        None
        if precompute is None
        else (
            _qualified(precompute.build),
            _qualified(precompute.evaluate),
            precompute.size,
            precompute.args,
            None if precompute.shared is None else tuple(sympy.srepr(v) for v in precompute.shared(*probe)),
        ),
    )
    return cls


def _qualified(fn) -> str:
    return f"{fn.py_func.__module__}.{fn.py_func.__qualname__}"


def _check_precompute(pre, nargs: int) -> None:
    if not isinstance(pre, Precompute):
        raise ValueError(f"precompute must be a dynamics.symbolic.Precompute; got {type(pre).__name__}")
    for what in ("build", "evaluate"):
        fn = getattr(pre, what)
        _kernels.check_model(f"precompute.{what}", fn, "a numba @njit function")
        if not _kernels._importable(fn):
            raise ValueError(f"precompute.{what} must be importable by name (a top-level function of a module)")
    if not isinstance(pre.size, int) or isinstance(pre.size, bool) or pre.size < 1:
        raise ValueError(f"precompute.size must be an int >= 1; got {pre.size!r}")
    if pre.shared is not None and not callable(pre.shared):
        raise ValueError(f"precompute.shared must be a callable of the arguments or None; got {pre.shared!r}")
    n_shared = 0 if pre.shared is None else len(tuple(pre.shared(*sympy.symbols(f"_a0:{nargs}"))))
    if pre.evaluate.py_func.__code__.co_argcount != nargs + n_shared + 2:
        raise ValueError(
            f"precompute.evaluate must take the {nargs} arguments, the {n_shared} shared values, the table and the "
            f"offset; it takes {pre.evaluate.py_func.__code__.co_argcount}"
        )
    args = pre.args
    if (
        not isinstance(args, tuple)
        or not args
        or len(set(args)) != len(args)
        or not all(isinstance(i, int) and 0 <= i < nargs for i in args)
    ):
        raise ValueError(
            f"precompute.args must be a non-empty tuple of distinct argument indices in [0, {nargs}); got {args!r}"
        )


def _functions(f) -> tuple:
    """The numba functions a registered function's module imports (its implementation, and its precompute's)."""
    pre = f._attndyn_precompute
    return (f._attndyn_impl,) if pre is None else (f._attndyn_impl, pre.build, pre.evaluate)


def _registered(expr) -> list:
    """The numba-backed function classes occurring in ``expr`` (any iterable of expressions), sorted by name."""
    found = {}
    for e in expr:
        for f in sympy.sympify(e).atoms(sympy.Function):
            if hasattr(type(f), "_attndyn_impl"):
                found[type(f).__name__] = type(f)
    return [found[k] for k in sorted(found)]


# ----------------------------------------------------------------------------------------------------------------
# printing


class _Printer(PythonCodePrinter):
    """Python source for numba: floats printed exactly, small integer powers as products, registered functions by
    their import alias.
    """

    def __init__(self):
        super().__init__({"fully_qualified_modules": True, "standard": "python3"})

    def _print(self, expr, **kwargs):
        if isinstance(expr, sympy.Function) and hasattr(type(expr), "_attndyn_site"):
            return f"_s{type(expr)._attndyn_site}({', '.join(self._print(a) for a in expr.args)}, _ok, _tab)"
        if isinstance(expr, sympy.Function) and hasattr(type(expr), "_attndyn_impl"):
            return f"_f_{type(expr).__name__}({', '.join(self._print(a) for a in expr.args)})"
        if isinstance(expr, sympy.Derivative):
            raise ValueError(f"no derivative rule for {expr}: give one to numba_function")
        return super()._print(expr, **kwargs)

    def _print_Float(self, expr):
        return repr(float(expr))

    def _print_Pow(self, expr, rational=False):
        """Integer and half-integer powers up to 8 as products (and one square root): a general ``**`` is a call
        to ``pow``, several times slower in a kernel.
        """
        base, e = expr.args
        b = self.parenthesize(base, sympy.printing.precedence.PRECEDENCE["Mul"] + 1)
        if e.is_Integer and 1 <= abs(int(e)) <= _MAX_PRODUCT_POWER:
            factors = [b] * abs(int(e))
        elif e.is_Rational and e.q == 2 and abs(e.p) <= 2 * _MAX_PRODUCT_POWER:
            factors = [b] * (abs(int(e.p)) // 2) + [f"math.sqrt({self._print(base)})"]
        else:
            return super()._print_Pow(expr, rational=rational)
        prod = "*".join(factors)
        return f"({prod})" if e > 0 else f"(1.0/({prod}))"


def _body(outputs, targets, indent="    ", prefix="_c") -> list[str]:
    """Lines assigning each expression of ``outputs`` to the target string of the same index, after cse."""
    printer = _Printer()
    subs, reduced = sympy.cse(list(outputs), symbols=sympy.numbered_symbols(prefix), order="none")
    lines = [f"{indent}{sym} = {printer.doprint(val)}" for sym, val in subs]
    lines += [f"{indent}{tgt} = {printer.doprint(val)}" for tgt, val in zip(targets, reduced)]
    return lines


def _import(name: str, path: pathlib.Path):
    """Import the generated module file ``path`` as ``name`` (registered in sys.modules, so that the engine can
    resolve its functions by module and qualified name).
    """
    module = _MODULES.get(name) or sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    _MODULES[name] = module
    return module


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
    except OSError:
        return "<unreadable>"


class _Table:
    """The once-per-parameter-row table of a model that calls a registered function with a :class:`Precompute`
    whose table arguments are expressions of the parameters alone.

    Each distinct (function, table arguments) is a call site with a slice of the table, and its calls become calls
    of a generated helper ``_s{j}(*args, *shared, _ok, _tab)``. Once a model has a table, every other
    subexpression of the parameters alone (square roots, quotients, a special function at parameter values) is
    computed in it too (``_h{k}``), instead of at every kernel call.

    Layout: the raw values of the parameters that the table depends on (the key), the values ``_h{k}``, the site
    tables. A kernel reads the table only when the key equals its own parameter row (``_ok``); otherwise it computes
    the values itself and calls the plain implementations, so a table built for other parameters (a row changed
    without rebuilding it, one shared table for rows that differ) costs speed, never correctness.
    """

    def __init__(self, params):
        self._params = frozenset(params)  # the parameter placeholders _p{i}
        self._sites = {}  # (name, table arguments) -> (index, helper class, function class, table arguments)
        self._values = {}  # expression of the parameters -> its symbol _h{k}

    def _param_only(self, e) -> bool:
        return e.free_symbols <= self._params

    def hoist(self, exprs: list) -> list:
        """``exprs`` with the call sites replaced by their helpers. Call it on every expression of the model before
        :meth:`split`, which hoists parameter-only subexpressions only once a site exists.
        """

        def query(e):
            pre = getattr(type(e), "_attndyn_precompute", None)
            return (
                pre is not None
                and all(self._param_only(e.args[i]) for i in pre.args)
                and not self._param_only(e)  # a value of the parameters alone is a table value itself
            )

        return [e.replace(query, self._site) if e.has(sympy.Function) else e for e in exprs]

    def _site(self, e):
        f = type(e)
        pre = f._attndyn_precompute
        fixed = tuple(e.args[i] for i in pre.args)
        key = (f.__name__, fixed)
        if key not in self._sites:
            j = len(self._sites)
            self._sites[key] = (j, type(f"_S{j}", (sympy.Function,), {"_attndyn_site": j}), f, fixed)
        shared = () if pre.shared is None else tuple(sympy.sympify(v) for v in pre.shared(*e.args))
        return self._sites[key][1](*e.args, *shared)

    @property
    def active(self) -> bool:
        return bool(self._sites)

    def split(self, e):
        """``e`` with its subexpressions of the parameters alone (and the parameter-only factors and terms of its
        products and sums) replaced by table symbols.
        """
        if not self.active or e.is_Atom:
            return e
        if self._param_only(e):
            return self._value(e)
        if isinstance(e, sympy.Add | sympy.Mul):
            const = [a for a in e.args if self._param_only(a)]
            rest = [self.split(a) for a in e.args if not self._param_only(a)]
            if len(const) >= 2:
                const = [self._value(e.func(*const))]
            else:
                const = [self.split(a) for a in const]
            return e.func(*const, *rest)
        return e.func(*[self.split(a) for a in e.args])

    def _value(self, e):
        if e.is_Number or e.is_Atom:
            return e
        if e not in self._values:
            self._values[e] = sympy.Symbol(f"_h{len(self._values)}")
        return self._values[e]

    def layout(self):
        """(key: indices of the parameters the table depends on, offset of the values, offsets of the site tables,
        total size).
        """
        used = set()
        for e in self._values:
            used |= e.free_symbols
        for _, _, _, fixed in self._sites.values():
            for a in fixed:
                used |= a.free_symbols
        key = sorted(int(str(u)[2:]) for u in used)
        offsets, size = [], len(key) + len(self._values)
        for _, _, f, _ in self._sites.values():
            offsets.append(size)
            size += f._attndyn_precompute.size
        return key, len(key), offsets, size

    def preamble(self) -> list[str]:
        """The kernel lines that set ``_ok`` and the table values ``_h{k}`` (from the table or computed)."""
        if not self.active:
            return []
        key, start, _, _ = self.layout()
        ok = " and ".join(f"_tab[{q}] == _p{u}" for q, u in enumerate(key)) or "True"
        lines = ["    _tab = args[0]", f"    _ok = {ok}", "    if _ok:"]
        lines += [f"        {h} = _tab[{start + k}]" for k, h in enumerate(self._values.values())]
        lines.append("    else:")
        lines += _body(list(self._values), [str(h) for h in self._values.values()], indent="        ", prefix="_k")
        return lines

    def source(self, n_params: int, decorator: str) -> list[str]:
        """The helpers ``_s{j}`` and ``table(p, out)`` / ``batch_table(P, OUT)`` that build the model's table."""
        if not self.active:
            return []
        printer = _Printer()
        key, start, offsets, _ = self.layout()
        lines = []
        build = [f"    _p{i} = p[{i}]" for i in range(n_params)]
        build += [f"    out[{q}] = _p{u}" for q, u in enumerate(key)]
        build += _body(list(self._values), [f"out[{start + k}]" for k in range(len(self._values))], prefix="_k")
        inline = decorator[:-1] + ', inline="always")'
        for (j, _, f, fixed), offset in zip(self._sites.values(), offsets):
            nargs = f._attndyn_impl.py_func.__code__.co_argcount
            n_shared = f._attndyn_precompute.evaluate.py_func.__code__.co_argcount - nargs - 2
            a = ", ".join(f"a{i}" for i in range(nargs))
            v = "".join(f", v{i}" for i in range(n_shared))
            lines += ["", "", inline, f"def _s{j}({a}{v}, ok, tab):", "    if ok:"]
            lines += [f"        return _e_{f.__name__}({a}{v}, tab, {offset})", f"    return _f_{f.__name__}({a})"]
            build.append(f"    _b_{f.__name__}({', '.join(printer.doprint(x) for x in fixed)}, out, {offset})")
        lines += ["", "", decorator, "def table(p, out):", *build, "    return None"]
        lines += [
            "",
            "",
            decorator,
            "def batch_table(P, OUT):",
            "    for i in range(P.shape[0]):",
            "        table(P[i], OUT[i])",
        ]
        return lines


# ----------------------------------------------------------------------------------------------------------------
# the model


def _symbols(name: str, values) -> tuple:
    if isinstance(values, str | sympy.Symbol):
        values = [values]
    out = []
    for v in values:
        if isinstance(v, str):
            v = sympy.Symbol(v, real=True)
        if not isinstance(v, sympy.Symbol):
            raise ValueError(f"{name} must be names or sympy Symbols; got {v!r}")
        out.append(v)
    if len({s.name for s in out}) != len(out):
        raise ValueError(f"{name} has repeated names: {[s.name for s in out]}")
    return tuple(out)


def _lookup(symbols, names, where):
    """Symbols of ``symbols`` by name (strings) or identity (Symbols), in the order of ``names``."""
    by_name = {s.name: s for s in symbols}
    out = []
    for n in names:
        key = n.name if isinstance(n, sympy.Symbol) else n
        if key not in by_name:
            raise ValueError(f"{where}: {key!r} is not a state variable (state: {sorted(by_name)})")
        out.append(by_name[key])
    return out


class SymbolicModel:
    """Compiled numba kernels and exact derivatives of a model given as sympy expressions.

    Symbols that match a state or parameter *name* are identified with it (whatever their assumptions). Any other
    free symbol raises ``ValueError``. Use :meth:`from_risk` to derive the map and the flow from a risk.

    Parameters
    ----------
    state : sequence of str or sympy Symbol
        The state variables, in the order of the state vector ``x``.
    params : sequence of str or sympy Symbol
        The parameters, in the order of the parameter row ``p`` given to the engine.
    map : sequence of sympy expressions, optional
        The next state, one expression per state variable (a discrete map ``x' = F(x; p)``).
    flow : sequence of sympy expressions, optional
        The vector field ``dx/dt = f(x; p)``.
    risk : sympy expression, optional
        A scalar function of the state (evaluated by :meth:`risk`, differentiated by :meth:`gradient`,
        :meth:`hessian`).
    aux : dict {sympy Symbol: expression}, optional
        Intermediate quantities, in order: each an expression of the state, the parameters and the earlier ones
        (order parameters of a reduction, the partials of a risk, a gradient), which ``map``, ``flow`` and
        ``risk`` may use as symbols. Each is computed once per kernel call, and derivatives follow the chain rule
        in forward mode: the total derivative of an auxiliary ``a`` is ``da/dx + sum_b da/db Db`` over the earlier
        ones ``b``, each ``Db`` computed once. This keeps the generated derivatives small; differentiating the
        substituted expressions instead repeats every inner derivative.
    gradient : sequence of auxiliary symbols (or names), optional
        The auxiliaries that are the partials of ``risk`` along the state variables, in order: the gradient
        kernel then reuses them and the Hessian is their total derivative (instead of differentiating ``risk``
        twice).
    derivatives : bool, default True
        Generate the Hessian and the Jacobians. False generates only the risk, its gradient, the map and the flow,
        which saves the second derivatives (the costly part of generating a large model).

    Attributes
    ----------
    state_names, param_names : tuple of str
        The names of the state variables and of the parameters, in order.
    step : numba function
        ``step(k, x, p, out)``: the map, an engine kernel for :func:`dynamics.iterate`; ``step(k, x, p, args, out)``
        with ``args = model.args(p)`` when the model has a table (``table_size > 0``).
    rhs : numba function
        ``rhs(t, x, p, out)`` (or ``rhs(t, x, p, args, out)``): the flow, for :func:`dynamics.integrate`.
    kernels : dict
        Every generated numba function by name (``risk``, ``gradient``, ``hessian``, ``step``, ``rhs``,
        ``jacobian_map``, ``jacobian_flow``: those the model has).
    table_size : int
        Floats in the model's once-per-parameter-row table (0: none). A model has one when it calls a registered
        function with a :class:`Precompute` at arguments that are expressions of the parameters alone; the table
        then also holds every other subexpression of the parameters alone, and all kernels take it.
    path : pathlib.Path
        The generated module's file.
    """

    def __init__(
        self,
        state,
        params=(),
        *,
        map=None,
        flow=None,
        risk=None,
        aux=None,  # noqa: A002
        gradient=None,
        derivatives: bool = True,
    ):
        self._grad_aux = None if gradient is None else tuple(gradient)
        self._init(state, params, map=map, flow=flow, risk=risk, aux=aux, derivatives=derivatives)

    def _init(self, state, params, *, map, flow, risk, aux, derivatives=True):  # noqa: A002
        if not isinstance(derivatives, bool):
            raise ValueError(f"derivatives must be True or False; got {derivatives!r}")
        self._with_derivatives = derivatives
        self._state = _symbols("state", state)
        self._params = _symbols("params", params)
        aux = dict(aux or {})
        self._aux_syms = _symbols("aux", list(aux))
        self._aux = []
        for i, e in enumerate(aux.values()):
            self._aux.append(self._canonical(sympy.sympify(e), "aux", self._aux_syms[:i]))
        if not self._state:
            raise ValueError("state must name at least one variable")
        if self._grad_aux is not None:
            if risk is None or len(self._grad_aux) != len(self._state):
                raise ValueError("gradient needs a risk and one auxiliary per state variable")
            by_name = {a.name: a for a in self._aux_syms}
            names = [g.name if isinstance(g, sympy.Symbol) else str(g) for g in self._grad_aux]
            if any(n not in by_name for n in names):
                raise ValueError(f"gradient must name auxiliaries (aux: {sorted(by_name)}); got {names}")
            self._grad_aux = tuple(by_name[n] for n in names)
        names = [s.name for s in self._state + self._params + self._aux_syms]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash:
            raise ValueError(f"state, params and aux share names {clash}")
        self._exprs = {}
        for key, value in (("map", map), ("flow", flow)):
            if value is not None:
                value = [self._canonical(sympy.sympify(v), key) for v in value]
                if len(value) != len(self._state):
                    raise ValueError(
                        f"{key} must have one expression per state variable ({len(self._state)}); got {len(value)}"
                    )
                self._exprs[key] = value
        if risk is not None:
            self._exprs["risk"] = self._canonical(sympy.sympify(risk), "risk")
        if not self._exprs:
            raise ValueError("give at least one of map, flow or risk")
        self._bind(self._load())

    def _bind(self, module):
        self._module = module
        self.kernels = {name: getattr(module, name) for name in module.KERNELS}
        self.step = self.kernels.get("step")
        self.rhs = self.kernels.get("rhs")
        self.path = pathlib.Path(module.__file__)
        self.table_size = int(module.TABLE_SIZE)

    @classmethod
    def cached(cls, builder):
        """The model ``builder()`` returns, found without calling it when a process built it before.

        ``builder`` is a top-level function of no arguments returning a :class:`SymbolicModel`. Its compiled module
        is looked up by a SHA-256 of the builder's source file, of this generator and of the numba/Python
        versions; when found (and the sources of its special functions are unchanged since, checked by their
        hashes), no sympy expression is built or differentiated, so loading costs an import and numba's cache.
        Otherwise ``builder()`` runs once and its module is stored under that hash. :meth:`expression` calls the
        builder when first needed.
        """
        import inspect

        src = pathlib.Path(inspect.getsourcefile(builder))
        h = hashlib.sha256()
        for part in (
            src.read_bytes(),
            builder.__module__.encode(),
            builder.__qualname__.encode(),
            _GENERATOR_FILE.read_bytes(),
            _kernels._digest((), None, "").encode(),
        ):
            h.update(part)
            h.update(b"\0")
        name = f"attndyn_symbolic_{builder.__name__.strip('_')}_{h.hexdigest()[:20]}"
        path = _kernels.kernel_dir() / f"{name}.py"
        module = _MODULES.get(name)
        if module is None and path.exists():
            module = _import(name, path)
            if not all(_file_digest(f) == d for f, d in module.DEPS.items()):
                module = None  # a special function's source changed: the content-hashed build below is right
        if module is not None:
            model = cls.__new__(cls)
            model._builder = builder
            model._bind(module)
            return model
        model = builder()
        if not path.exists():
            files = set()
            for f in _registered(model._all_exprs()):
                for fn in _functions(f):
                    _kernels._dependency_files(fn, files=files)
            deps = {f: _file_digest(f) for f in sorted(files)}
            _kernels._write_once(path, model.path.read_text() + f"DEPS = {deps!r}\n")
        module = _import(name, path)
        if all(_file_digest(f) == d for f, d in module.DEPS.items()):
            model._bind(module)
        return model

    # --------------------------------------------------------------------------------------------------------
    # construction

    @classmethod
    def from_risk(
        cls, risk, state, params=(), *, step_size="alpha", spheres=(), order_params=None, derivatives: bool = True
    ):
        """The gradient-descent map and gradient flow of ``risk``, projected onto unit spheres where asked.

        Parameters
        ----------
        risk : sympy expression of the state and the parameters.
        state, params : as for :class:`SymbolicModel`.
        step_size : str
            Name of the map's step size. If it is not among ``params`` it is appended to them as the last
            parameter (the flow does not use it).
        spheres : sequence of sequences of state names
            Groups of state variables constrained to a unit sphere each (a product of spheres): the map is
            projected gradient descent, ``u' = (u - alpha (g - (u.g) u)) / |u - alpha (g - (u.g) u)|`` on each
            group ``u`` with gradient ``g``, and the flow the Riemannian gradient flow ``-(g - (u.g) u)``. Other
            variables take plain steps ``x - alpha g`` and ``-g``.
        order_params : dict {sympy Symbol: expression of the state}, optional
            Intermediate variables through which ``risk`` depends on the state (e.g. the overlaps of weight
            vectors): the risk is then differentiated in them and the chain rule applied in the generated code,
            which is much cheaper than differentiating the substituted risk when the state is large.
        derivatives : bool, default True
            As for :class:`SymbolicModel`.

        Returns
        -------
        SymbolicModel with ``risk``, ``map`` and ``flow``.
        """
        state = _symbols("state", state)
        params = _symbols("params", params)
        if not isinstance(step_size, str) or not step_size.isidentifier():
            raise ValueError(f"step_size must be a parameter name; got {step_size!r}")
        if step_size in {s.name for s in state}:
            raise ValueError(f"step_size {step_size!r} is a state variable; name a parameter")
        names = [s.name for s in params]
        alpha = params[names.index(step_size)] if step_size in names else sympy.Symbol(step_size, real=True)
        if step_size not in names:
            params = params + (alpha,)
        risk = sympy.sympify(risk)
        order_params = dict(order_params or {})
        # identify by name, as the constructor does
        ident = {f.name: f for f in state + params}
        risk = risk.xreplace({f: ident[f.name] for f in risk.free_symbols if f.name in ident})
        aux = {}
        if order_params:
            osyms = _symbols("order_params", list(order_params))
            ovals = [sympy.sympify(v) for v in order_params.values()]
            ovals = [v.xreplace({f: ident[f.name] for f in v.free_symbols if f.name in ident}) for v in ovals]
            osyms_named = {o.name: o for o in osyms}
            risk = risk.xreplace({f: osyms_named[f.name] for f in risk.free_symbols if f.name in osyms_named})
            aux.update(zip(osyms, ovals))
            fsyms = sympy.symbols(f"_dR0:{len(osyms)}", real=True)
            aux.update({f: sympy.diff(risk, o) for f, o in zip(fsyms, osyms)})
            direct = [sympy.diff(risk, s) for s in state]  # the risk may also use the state directly
            partials = [d + sum(f * sympy.diff(v, s) for f, v in zip(fsyms, ovals)) for d, s in zip(direct, state)]
        else:
            partials = [sympy.diff(risk, s) for s in state]
        gsyms = sympy.symbols(f"_grad0:{len(state)}", real=True)
        aux.update(zip(gsyms, partials))
        grad = list(gsyms)
        step = [s - alpha * g for s, g in zip(state, grad)]
        flow = [-g for g in grad]
        seen = set()
        for group in spheres:
            members = _lookup(state, group, "spheres")
            if len(members) < 2 or seen & set(members):
                raise ValueError(f"spheres must be disjoint groups of >= 2 state variables; got {list(spheres)}")
            seen |= set(members)
            idx = [state.index(m) for m in members]
            radial = sum(state[i] * grad[i] for i in idx)
            moved = {i: state[i] - alpha * (grad[i] - radial * state[i]) for i in idx}
            norm = sympy.sqrt(sum(m**2 for m in moved.values()))
            for i in idx:
                step[i] = moved[i] / norm
                flow[i] = -(grad[i] - radial * state[i])
        model = cls.__new__(cls)
        model._grad_aux = gsyms
        model._init(state, params, map=step, flow=flow, risk=risk, aux=aux, derivatives=derivatives)
        return model

    def _canonical(self, expr, where, aux=None):
        """``expr`` with its symbols identified with the state, parameter and auxiliary symbols (``aux``: those
        it may use, default all) by name; unknown ones raise.
        """
        aux = self._aux_syms if aux is None else aux
        known = {s.name: s for s in self._state + self._params + tuple(aux)}
        unknown = sorted(s.name for s in expr.free_symbols if s.name not in known)
        if unknown:
            raise ValueError(
                f"{where} has free symbols {unknown} that are neither state {self.state_names}, "
                f"params {self.param_names} nor (earlier) aux {[a.name for a in aux]}"
            )
        return expr.xreplace({s: known[s.name] for s in expr.free_symbols})

    @property
    def state_names(self) -> tuple:
        """Names of the state variables, in the order of the state vector."""
        return tuple(self._module.STATE_NAMES) if hasattr(self, "_module") else tuple(s.name for s in self._state)

    @property
    def param_names(self) -> tuple:
        """Names of the parameters, in the order of the parameter row."""
        return tuple(self._module.PARAM_NAMES) if hasattr(self, "_module") else tuple(s.name for s in self._params)

    # sympy derivatives (computed when first asked for; a warm process that only runs kernels never needs them)
    def _dsym(self, i, j):
        """Placeholder of the total derivative of auxiliary i along state variable j."""
        return sympy.Symbol(f"_D{i}_{j}", real=True)

    def _total(self, exprs):
        """Jacobian (len(exprs), n_state) of ``exprs`` with the auxiliaries' total derivatives as placeholders."""
        x = sympy.Matrix(self._state)
        F = sympy.Matrix(exprs)
        J = F.jacobian(x)
        if self._aux:
            D = sympy.Matrix(len(self._aux), len(self._state), self._dsym)
            J = J + F.jacobian(sympy.Matrix(self._aux_syms)) * D
        return J

    def _derived(self):
        if not hasattr(self, "_sym"):
            sym = {}
            if "risk" in self._exprs:
                sym["risk"] = self._exprs["risk"]
                if self._grad_aux is not None:  # the gradient is an auxiliary and the Hessian its derivative
                    sym["gradient"] = sympy.Matrix(self._grad_aux)
                    idx = [self._aux_syms.index(g) for g in self._grad_aux]
                    if self._with_derivatives:
                        sym["hessian"] = sympy.Matrix(len(idx), len(self._state), lambda i, j: self._dsym(idx[i], j))
                else:
                    sym["gradient"] = self._total([sym["risk"]]).T
                    if self._with_derivatives:
                        sym["hessian"] = self._total(list(sym["gradient"]))
            for key, name in (("map", "step"), ("flow", "rhs")):
                if key in self._exprs:
                    sym[name] = sympy.Matrix(self._exprs[key])
                    if self._with_derivatives:
                        sym[f"jacobian_{key}"] = self._total(self._exprs[key])
            self._sym = sym
        return self._sym

    def _substituted(self):
        """Substitution of every auxiliary and derivative placeholder by its expression of state and params."""
        sub = {}
        x = sympy.Matrix(self._state)
        for i, (a, e) in enumerate(zip(self._aux_syms, self._aux)):
            full = e.xreplace(sub)
            sub[a] = full
            for j, dj in enumerate(sympy.Matrix([full]).jacobian(x)):
                sub[self._dsym(i, j)] = dj
        return sub

    def expression(self, name: str):
        """The sympy expression (scalar or Matrix) of ``name``: one of ``risk``, ``gradient``, ``hessian``,
        ``step`` (the map), ``rhs`` (the flow), ``jacobian_map``, ``jacobian_flow``, in the state and parameters
        (auxiliaries and their derivatives substituted).
        """
        if not hasattr(self, "_exprs"):  # loaded by cached(): build the expressions now
            return self._builder().expression(name)
        sym = self._derived()
        if name not in sym:
            raise ValueError(f"name must be one of {sorted(sym)}; got {name!r}")
        return sym[name].xreplace(self._substituted()) if self._aux else sym[name]

    # --------------------------------------------------------------------------------------------------------
    # code generation

    def _key(self) -> str:
        """SHA-256 of everything the generated source depends on (computed without differentiating anything)."""
        h = hashlib.sha256()
        parts = [
            self.state_names,
            self.param_names,
            tuple(s.name for s in self._aux_syms),
            tuple(sympy.srepr(e) for e in self._aux),
            self._grad_aux is not None,
            self._with_derivatives,
        ]
        for key in sorted(self._exprs):
            e = self._exprs[key]
            parts.append((key, sympy.srepr(e) if key == "risk" else tuple(sympy.srepr(v) for v in e)))
        funcs = _registered(self._all_exprs())
        parts += [f._attndyn_key for f in funcs]
        h.update(repr(parts).encode())
        h.update(_GENERATOR_FILE.read_bytes())
        # sources of the special functions (and what they call) and the engine's versions, as the engine does
        h.update(_kernels._digest(tuple(fn for f in funcs for fn in _functions(f)), None, "").encode())
        return h.hexdigest()

    def _all_exprs(self):
        out = list(self._aux)
        for e in self._exprs.values():
            out.extend(e if isinstance(e, list) else [e])
        return out

    def _source(self) -> str:
        sym = self._derived()
        names = {s: sympy.Symbol(f"_x{i}") for i, s in enumerate(self._state)}
        names.update({s: sympy.Symbol(f"_p{i}") for i, s in enumerate(self._params)})
        names.update({s: sympy.Symbol(f"_a{i}") for i, s in enumerate(self._aux_syms)})
        n = len(self._state)
        specs = []  # (name, signature without the table, output shape, outputs, targets)
        for name, sig, shape in (
            ("risk", "x, p", None),
            ("gradient", "x, p, out", (n,)),
            ("hessian", "x, p, out", (n, n)),
            ("step", "k, x, p, out", (n,)),
            ("rhs", "t, x, p, out", (n,)),
            ("jacobian_map", "x, p, out", (n, n)),
            ("jacobian_flow", "x, p, out", (n, n)),
        ):
            if name not in sym:
                continue
            expr = sym[name]
            if shape is None:
                outputs, targets = [expr], ["_r"]
            elif len(shape) == 1:
                outputs, targets = list(expr), [f"out[{i}]" for i in range(n)]
            else:
                outputs = [expr[i, j] for i in range(n) for j in range(n)]
                targets = [f"out[{i}, {j}]" for i in range(n) for j in range(n)]
            specs.append((name, sig, shape, [sympy.sympify(o).xreplace(names) for o in outputs], targets))
        tab = _Table(v for k, v in names.items() if k in self._params)
        levels = self._aux_levels(names)
        flat = [e for values, dvalues in levels for _, e in values + dvalues]
        flat += [o for spec in specs for o in spec[3]]
        flat = iter([tab.split(e) for e in tab.hoist(flat)])  # every site found before any expression is split
        pre = [
            ([(t, next(flat)) for t, _ in values], [(t, next(flat)) for t, _ in dvalues]) for values, dvalues in levels
        ]
        specs = [(name, sig, shape, [next(flat) for _ in outs], tg) for name, sig, shape, outs, tg in specs]
        table = tab.active
        pre_lines = {}
        unpack = [f"    _x{i} = x[{i}]" for i in range(len(self._state))] + [
            f"    _p{i} = p[{i}]" for i in range(len(self._params))
        ]
        unpack += tab.preamble()
        decorator = '@njit(cache=True, fastmath=False, error_model="numpy", nogil=True)'
        lines = [
            f"# Generated by dynamics.symbolic for state {self.state_names}, params {self.param_names}; do not edit.",
            "import math",
            "import numpy as np",
            "from numba import njit",
            "from dynamics._kernels import resolve_model",
        ]
        for f in _registered(self._all_exprs()):
            for prefix, fn in zip(("_f_", "_b_", "_e_"), _functions(f)):
                module, qualname = _qualified(fn).rsplit(".", 1)
                lines.append(f"{prefix}{f.__name__} = resolve_model({module!r}, {qualname!r})")
        kernels = []
        for name, sig, shape, outputs, targets in specs:
            kernels.append(name)
            if table:  # the engine's data argument comes before the output (or last, for the risk)
                sig = sig.replace(", out", ", args, out") if "out" in sig else sig + ", args"
            used = set().union(*(o.free_symbols for o in outputs))
            derivs = any(str(u).startswith("_D") for u in used)
            lines += ["", "", decorator, f"def {name}({sig}):", *unpack]
            if any(str(u).startswith(("_a", "_D")) for u in used):
                if derivs not in pre_lines:  # auxiliaries (and their derivatives) level by level, printed once
                    pre_lines[derivs] = []
                    for level, (values, dvalues) in enumerate(pre):
                        exprs = [e for _, e in values] + ([e for _, e in dvalues] if derivs else [])
                        targets_l = [t for t, _ in values] + ([t for t, _ in dvalues] if derivs else [])
                        pre_lines[derivs] += _body(exprs, targets_l, prefix=f"_l{level}_")
                lines += pre_lines[derivs]
            lines += _body(outputs, targets)
            lines.append("    return _r" if shape is None else "    return None")
            # batched form: rows of X (and of P and T, or one shared row) into rows of OUT
            lines += [
                "",
                "",
                decorator,
                f"def batch_{name}(X, P, T, OUT):",
                "    shared = P.shape[0] == 1",
                "    shared_t = T.shape[0] == 1",
                "    for i in range(X.shape[0]):",
                "        p = P[0] if shared else P[i]",
            ]
            data = ", (T[0] if shared_t else T[i],)" if table else ""
            call = {
                "risk": f"OUT[i] = risk(X[i], p{data})",
                "step": f"step(0, X[i], p{data}, OUT[i])",
                "rhs": f"rhs(0.0, X[i], p{data}, OUT[i])",
            }.get(name, f"{name}(X[i], p{data}, OUT[i])")
            lines.append(f"        {call}")
        lines += tab.source(len(self._params), decorator)
        lines += [
            "",
            "",
            f"KERNELS = {tuple(kernels)!r}",
            f"STATE_NAMES = {self.state_names!r}",
            f"PARAM_NAMES = {self.param_names!r}",
            f"TABLE_SIZE = {tab.layout()[3] if table else 0}",
            "",
        ]
        return "\n".join(lines)

    def _aux_levels(self, names):
        """Auxiliaries grouped by level (a level uses only earlier levels), each as ([(target, value)],
        [(target, total derivative)]); derivative targets are the placeholders ``_D{i}_{j}``.
        """
        x = [names[s] for s in self._state]
        level_of = {}
        levels = []
        for i, e in enumerate(self._aux):
            e = e.xreplace(names)
            deps = [k for k in range(i) if sympy.Symbol(f"_a{k}") in e.free_symbols]
            lv = 1 + max((level_of[k] for k in deps), default=-1)
            level_of[i] = lv
            while len(levels) <= lv:
                levels.append(([], []))
            levels[lv][0].append((f"_a{i}", e))
            for j, xj in enumerate(x):
                d = sympy.diff(e, xj) + sum(sympy.diff(e, sympy.Symbol(f"_a{k}")) * self._dsym(k, j) for k in deps)
                levels[lv][1].append((f"_D{i}_{j}", d))
        return levels

    def _load(self):
        key = self._key()
        name = f"attndyn_symbolic_{key[:24]}"
        module = _MODULES.get(name)
        if module is None:
            path = _kernels.kernel_dir() / f"{name}.py"
            if not path.exists():
                _kernels._write_once(path, self._source())
            module = _import(name, path)
        return module

    # --------------------------------------------------------------------------------------------------------
    # numeric evaluation (batched over leading axes)

    def params_row(self, **values) -> np.ndarray:
        """The parameter row ``p`` (float64, in the order of ``param_names``) from keyword values; every parameter
        must be given.
        """
        missing = [n for n in self.param_names if n not in values]
        extra = sorted(set(values) - set(self.param_names))
        if missing or extra:
            raise ValueError(
                f"params_row needs exactly the parameters {self.param_names}; missing {missing}, unknown {extra}"
            )
        return np.array([float(values[n]) for n in self.param_names], dtype=np.float64)

    def _call(self, name, x, p, shape):
        if name not in self.kernels:
            raise ValueError(f"this model has no {name} (it has {sorted(self.kernels)})")
        n = len(self.state_names)
        X = np.asarray(x, dtype=np.float64)
        if X.ndim == 0 or X.shape[-1] != n:
            raise ValueError(f"x must have shape (..., {n}) (state {self.state_names}); got {X.shape}")
        n_p = max(len(self.param_names), 1)
        P = np.asarray(np.zeros(1) if p is None or len(self.param_names) == 0 else p, dtype=np.float64)
        if P.ndim == 0 or P.shape[-1] != n_p:
            raise ValueError(f"p must have shape (..., {n_p}) (params {self.param_names}); got {P.shape}")
        lead = np.broadcast_shapes(X.shape[:-1], P.shape[:-1])
        Xf = np.ascontiguousarray(np.broadcast_to(X, lead + (n,)).reshape(-1, n))
        Pf = (
            np.ascontiguousarray(P.reshape(1, n_p))
            if P.ndim == 1
            else np.ascontiguousarray(np.broadcast_to(P, lead + (n_p,)).reshape(-1, n_p))
        )
        out = np.empty((Xf.shape[0],) + shape)
        T = self._tables(Pf) if self.table_size else np.zeros((1, 1))
        getattr(self._module, f"batch_{name}")(Xf, Pf, T, out)
        return out.reshape(lead + shape)[()]

    def _tables(self, P):
        """The tables of the rows of ``P`` (m, n_params): shape (m, table_size)."""
        T = np.empty((P.shape[0], self.table_size))
        self._module.batch_table(P, T)
        return T

    def args(self, params):
        """The engine's data argument for the parameter row(s) ``params``: None for a model without precomputed
        tables (four-argument kernels), else ``(table,)`` for the five-argument kernels ``step(k, x, p, args, out)``
        and ``rhs(t, x, p, args, out)``.

        A 1-D ``params`` (or one row) gives one shared table; rows ``(n, n_params)`` give one table per row, to
        pass with ``args_per_trajectory=True``. The kernels check each table against their own parameter row and
        evaluate directly where it does not match (a row changed without rebuilding the table): same values, less
        speed.
        """
        if not self.table_size:
            return None
        n_p = len(self.param_names)
        P = np.asarray(params, dtype=np.float64)
        if P.ndim not in (1, 2) or P.shape[-1] != n_p:
            raise ValueError(
                f"params must have shape ({n_p},) or (n, {n_p}) (params {self.param_names}); got {P.shape}"
            )
        T = self._tables(np.ascontiguousarray(P.reshape(-1, n_p)))
        return (T[0],) if P.ndim == 1 or P.shape[0] == 1 else (T,)

    def risk(self, x, p=None):
        """The risk at states ``x`` (..., n_state) with parameter rows ``p`` (..., n_params)."""
        return self._call("risk", x, p, ())

    def gradient(self, x, p=None) -> np.ndarray:
        """dR/dx at ``x`` (..., n_state): shape (..., n_state)."""
        return self._call("gradient", x, p, (len(self.state_names),))

    def hessian(self, x, p=None) -> np.ndarray:
        """d2R/dx2 at ``x``: shape (..., n_state, n_state)."""
        n = len(self.state_names)
        return self._call("hessian", x, p, (n, n))

    def map(self, x, p=None) -> np.ndarray:
        """One step of the map from ``x`` (the engine's ``step`` at k = 0)."""
        return self._call("step", x, p, (len(self.state_names),))

    def vector_field(self, x, p=None) -> np.ndarray:
        """The flow's vector field at ``x``."""
        return self._call("rhs", x, p, (len(self.state_names),))

    def jacobian_map(self, x, p=None) -> np.ndarray:
        """Jacobian dF/dx of the map at ``x``: shape (..., n_state, n_state), row i = component i of F. A callable
        ``jac(x, p)`` as fixed-point and stability routines take it.
        """
        n = len(self.state_names)
        return self._call("jacobian_map", x, p, (n, n))

    def jacobian_flow(self, x, p=None) -> np.ndarray:
        """Jacobian df/dx of the vector field at ``x``: shape (..., n_state, n_state)."""
        n = len(self.state_names)
        return self._call("jacobian_flow", x, p, (n, n))

    # --------------------------------------------------------------------------------------------------------
    # engine runs

    def iterate(self, state0, n_steps, *, params, **kwargs):
        """:func:`dynamics.iterate` of the map, with the state names filled in."""
        from dynamics.integrate import iterate

        if self.step is None:
            raise ValueError("this model has no map; build it with map= or from_risk")
        kwargs.setdefault("names", list(self.state_names))
        self._with_args(params, kwargs)
        return iterate(self.step, state0, n_steps, params=params, **kwargs)

    def _with_args(self, params, kwargs):
        """The model's tables as the engine's data argument, one per trajectory for parameter rows."""
        if self.table_size and "args" not in kwargs:
            kwargs["args"] = self.args(params)
            kwargs.setdefault("args_per_trajectory", kwargs["args"][0].ndim == 2)

    def integrate(self, state0, t_span, *, params, **kwargs):
        """:func:`dynamics.integrate` of the flow, with the state names filled in."""
        from dynamics.integrate import integrate

        if self.rhs is None:
            raise ValueError("this model has no flow; build it with flow= or from_risk")
        kwargs.setdefault("names", list(self.state_names))
        self._with_args(params, kwargs)
        return integrate(self.rhs, state0, t_span, params=params, **kwargs)

    def __repr__(self):
        return f"SymbolicModel(state={self.state_names}, params={self.param_names}, kernels={tuple(self.kernels)})"
