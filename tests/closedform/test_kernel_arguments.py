"""No model packs data into the engine's parameter row: samples, tables and index arrays reach a kernel through the
``args`` channel (the five-argument form), so a kernel never casts an entry of ``p`` back to an index or slices a
block of data out of it.

The check reads each model's kernel module: every function whose signature is an engine step or vector field
(``p`` its third argument: ``(k, x, p, ...)`` / ``(t, y, p, ...)``) is inspected for ``int(p[...])``,
``p[...].astype``, ``p[a:b]`` slices and reshapes of ``p``. A planted packing kernel is rejected by the same check.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import pytest

from closedform import models

MODULES = models.names(builtin=True)


def packing_uses(source: str) -> list[str]:
    """Lines of engine-signature functions in ``source`` that read data or indices out of the parameter row."""
    found = []
    for fn in ast.walk(ast.parse(textwrap.dedent(source))):
        if not isinstance(fn, ast.FunctionDef):
            continue
        names = [a.arg for a in fn.args.args]
        if len(names) < 4 or names[2] != "p":  # not (step or time, state, p, [args,] out)
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "p":
                if isinstance(node.slice, ast.Slice):
                    found.append(f"{fn.name}: slice of p at line {node.lineno}")
            if isinstance(node, ast.Call):
                callee = node.func
                if (
                    isinstance(callee, ast.Name)
                    and callee.id == "int"
                    and node.args
                    and isinstance(node.args[0], ast.Subscript)
                    and isinstance(node.args[0].value, ast.Name)
                    and node.args[0].value.id == "p"
                ):
                    found.append(f"{fn.name}: int(p[...]) at line {node.lineno}")
                if (
                    isinstance(callee, ast.Attribute)
                    and callee.attr in ("astype", "reshape")
                    and isinstance(callee.value, ast.Subscript)
                    and isinstance(callee.value.value, ast.Name)
                    and callee.value.value.id == "p"
                ):
                    found.append(f"{fn.name}: p[...].{callee.attr} at line {node.lineno}")
    return found


@pytest.mark.parametrize("model", MODULES)
def test_model_kernels_take_data_through_args(model):
    module = importlib.import_module(f"closedform._{model}_kernels")
    assert packing_uses(inspect.getsource(module)) == []


def test_a_planted_packing_kernel_is_rejected():
    planted = """
def step(k, x, p, out):
    n = int(p[2])
    table = p[4:4 + n].reshape((n, 1))
    idx = p[3:4].astype(np.int64)
    out[0] = x[0] * table[idx[0], 0]
"""
    assert len(packing_uses(planted)) == 5  # int(), reshape and astype of p, and the two slices
    clean = """
def step(k, x, p, args, out):
    out[0] = p[0] * x[0] + args[0][args[1][0]]
"""
    assert packing_uses(clean) == []
