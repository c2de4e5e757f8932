"""Engine kernels generated per model function and cached on disk across processes (private).

A kernel that takes the model function as an argument cannot be cached by numba (a dispatcher argument is not a
cacheable type), so it would recompile in every process. Instead, for each (kernel kind, method, model function)
this module writes one small Python source file in which the model function is a module global ``MODEL`` (imported
from its module by qualified name, so numba inlines it as if hand-written) and compiles it with ``cache=True``.

* The file name carries a SHA-256 of the generated source, the model's module and qualified name, the bytes of the
  source files the model depends on (its module and those of the numba functions it calls, found by walking its
  globals), the engine's own files and the numba/Python versions; so any change of the model or the engine gives a
  new file and a fresh compile, and an unchanged one loads numba's cache (tens of milliseconds).
* Files are created atomically and never overwritten (written to a temporary name, then hard-linked into place; a
  process that loses the race uses the winner's identical file), so two processes compiling at once are safe and
  numba's source-timestamp check stays valid.
* The folder is ``$ATTNDYN_KERNEL_DIR``, else ``$NUMBA_CACHE_DIR/attndyn_kernels``, else
  ``$XDG_CACHE_HOME/attndyn/kernels`` (``~/.cache``), else a per-user temporary folder: the first that is a real
  directory owned by this user and writable by no one else (created 0700; one this user owns is tightened with
  chmod go-w). A generated file is imported only if it is a regular file owned by this user, writable by no one
  else, whose bytes equal the source this process generated (the name carries its digest); otherwise, or without
  a safe folder, the kernel is compiled in memory with a warning, never imported from an untrusted file.
* A model function that cannot be imported by name (defined in ``__main__`` or inside a function) gets the same
  kernel compiled in memory, without disk caching.

Kernels run every trajectory with exactly the arithmetic of a one-at-a-time run (a batched run equals the
one-at-a-time runs bit for bit) and write saves into a pre-allocated array inside the compiled loop. The map kernel
interleaves the steps of two trajectories (see its docstring); the ODE kernels run one trajectory after the other.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pathlib
import stat
import sys
import sysconfig
import tempfile
import threading
import types
import warnings

import numba
from numba.core.registry import CPUDispatcher

import numpy as np

from dynamics import _steppers

_ENGINE_FILES = (pathlib.Path(__file__), pathlib.Path(_steppers.__file__))
_LOADED: dict = {}
_LOAD_LOCK = threading.RLock()
_STDLIB = tuple(
    p
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    if p
)


def check_model(name: str, fn, signature: str):
    """Raise ``TypeError`` naming ``name`` unless ``fn`` is a numba ``@njit`` function."""
    if not isinstance(fn, CPUDispatcher):
        kind = "a plain Python function" if callable(fn) else type(fn).__name__
        raise TypeError(
            f"{name} must be a numba @njit function {signature}; got {kind} {fn!r}. Decorate it with "
            "numba.njit (cache=True recommended)"
        )
    return fn


def resolve_model(module: str, qualname: str):
    """The object named ``qualname`` in ``module`` (used by generated kernel files)."""
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# Map and fixed-step kernels for states of at most this many components are specialised on the state size (a
# constant trip count lets LLVM unroll the per-step check/copy loops: ~10% on a 3-component map).
UNROLL_MAX = 8


def get_kernel(
    kind: str,
    fn,
    tableau: _steppers.Tableau | None = None,
    n_state: int | None = None,
    observe=None,
    fused=None,
    args_spec: tuple | None = None,
):
    """The compiled kernel ``kind`` ('map', 'fixed' or 'adaptive') for model ``fn`` (and ``tableau``).

    ``observe`` (a numba function ``observe(k, x, p, out)``, or None) becomes the global ``OBS`` of the generated
    module and part of its cache key: the kernel then evaluates it at every save point into ``O[i, j]``. For maps,
    ``fused`` (``fused(k, x, p, out, obs)``: the step and the observables of x in one call, or None) becomes
    ``FUSED``, used for the saves that a step follows.

    ``args_spec`` is None for model functions of the four-argument form, else one bool per data array of the
    five-argument form ``fn(k, x, p, args, out)`` (``observe(k, x, p, args, out)``, ``fused(k, x, p, args, out,
    obs)``): True for an array whose leading axis is the trajectory (trajectory i sees row i), False for an array
    shared by all trajectories. Every kernel takes the args tuple ``A`` as its last argument (:data:`NO_ARGS` for
    the four-argument form) and calls the model functions in the five-argument form, through adapters generated
    here for four-argument functions.
    """
    if fused is not None and (kind != "map" or observe is None):
        raise ValueError("a fused step-and-observe function needs kind 'map' and an observe function")
    spec = n_state if kind != "adaptive" and n_state is not None and n_state <= UNROLL_MAX else None
    args_spec = None if args_spec is None else tuple(bool(b) for b in args_spec)
    key = (kind, fn, None if tableau is None else tableau.name, spec, observe, fused, args_spec)
    kernel = _LOADED.get(key)
    if kernel is None:
        n_src = "X.shape[1]" if spec is None else str(int(spec))
        source = (
            _map_source(tableau, n_src, observe is not None, fused is not None)
            if kind == "map"
            else _SOURCES[kind](tableau, n_src, observe is not None)
        )
        source = _args_source(args_spec, observe is not None, fused is not None) + source
        kind_name = kind if spec is None else f"{kind}{spec}"
        funcs = tuple(f for f in (fn, observe, fused) if f is not None)
        kernel = (
            _load_cached(kind_name, funcs, tableau, source)
            if all(_importable(f) for f in funcs)
            else _compile_in_memory(funcs, source)
        )
        _LOADED[key] = kernel
    return kernel


# The args tuple handed to kernels of four-argument model functions (never read by them).
NO_ARGS = (np.zeros(0),)


def _args_source(args_spec, obs: bool, fused: bool) -> str:
    """The generated module's five-argument MODEL/OBS/FUSED (the model's own functions, or adapters that drop the
    args row of a four-argument function) and ``args_row(A, i)``, the data trajectory i sees.
    """
    lines = []
    for name, sig, call, present in (
        ("MODEL", "a, x, p, g, out", "a, x, p, out", True),
        ("OBS", "a, x, p, g, out", "a, x, p, out", obs),
        ("FUSED", "a, x, p, g, out, obs", "a, x, p, out, obs", fused),
    ):
        if not present:
            continue
        if args_spec is None:
            lines += ["@njit(cache=CACHE, fastmath=False)", f"def {name}({sig}):", f"    {name}_FN({call})", ""]
        else:
            lines.append(f"{name} = {name}_FN")
    if args_spec is None or not any(args_spec):
        row = "A"
    else:
        row = "(" + "".join(f"A[{q}][i], " if per else f"A[{q}], " for q, per in enumerate(args_spec)) + ")"
    lines += ["", "@njit(cache=CACHE, fastmath=False)", "def args_row(A, i):", f"    return {row}", ""]
    return "\n" + "\n".join(lines) + "\n"


def _importable(fn) -> bool:
    module, qualname = fn.py_func.__module__, fn.py_func.__qualname__
    if module in (None, "__main__") or "<locals>" in qualname:
        return False
    try:
        return resolve_model(module, qualname) is fn
    except (ImportError, AttributeError):
        return False


def _header(cache: bool) -> str:
    return (
        "import numpy as np\nfrom numba import njit\n"
        "from dynamics._steppers import (commit_moved, fill_frozen, first_bad, in_tail, is_bad, max_abs,\n"
        "                               rms_scaled, step_factor, tail_add)\n"
        f"CACHE = {cache}\n"
    )


# Globals of a generated module: the model function, then (optionally) the observables function.
_GLOBALS = ("MODEL_FN", "OBS_FN", "FUSED_FN")


def _compile_in_memory(funcs, source: str):
    namespace = dict(zip(_GLOBALS, funcs))
    label = " + ".join(f.py_func.__qualname__ for f in funcs)
    exec(compile(_header(False) + source, f"<attndyn kernel for {label}>", "exec"), namespace)
    return namespace["kernel"]


def _dependency_files(fn, seen=None, files=None) -> set:
    """Source files of ``fn`` and of the numba functions it calls, transitively (outside the standard library and
    site-packages).
    """
    seen = set() if seen is None else seen
    files = set() if files is None else files
    if id(fn) in seen:
        return files
    seen.add(id(fn))
    py = fn.py_func
    files.add(py.__code__.co_filename)
    g = py.__globals__
    names = set()
    stack = [py.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    for name in names:
        obj = g.get(name)
        candidates = [obj]
        if isinstance(obj, types.ModuleType):
            candidates = [getattr(obj, n, None) for n in names]
            f = getattr(obj, "__file__", None)
            if f and not f.startswith(_STDLIB):
                files.add(f)
        for cand in candidates:
            if isinstance(cand, CPUDispatcher):
                _dependency_files(cand, seen, files)
    return files


def _digest(funcs, tableau, source: str) -> str:
    h = hashlib.sha256()
    names = [part for f in funcs for part in (f.py_func.__module__, f.py_func.__qualname__)]
    for part in (source, *names, numba.__version__, sys.version, "" if tableau is None else repr(tableau)):
        h.update(part.encode())
        h.update(b"\0")
    files = set()
    for f in funcs:
        _dependency_files(f, files=files)
    for path in sorted(files | {str(p) for p in _ENGINE_FILES}):
        h.update(path.encode())
        try:
            h.update(pathlib.Path(path).read_bytes())
        except OSError:
            h.update(b"<unreadable>")
    return h.hexdigest()


def _safe_folder(folder: pathlib.Path) -> bool:
    """True for a real directory (not a link) owned by this user that no one else may write to; a folder this
    user owns but that others may write to is tightened first (chmod go-w), since nothing else may be loaded from
    there until it is. Created with mode 0700 when missing.
    """
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    if st.st_mode & 0o022:
        try:
            os.chmod(folder, stat.S_IMODE(st.st_mode) & ~0o022)
        except OSError:
            return False
    return os.access(folder, os.W_OK | os.X_OK)


def kernel_dir() -> pathlib.Path | None:
    """The folder of generated kernel sources (see the module docstring), or None when no candidate is safe."""
    candidates = []
    if os.environ.get("ATTNDYN_KERNEL_DIR"):
        candidates.append(pathlib.Path(os.environ["ATTNDYN_KERNEL_DIR"]))
    if os.environ.get("NUMBA_CACHE_DIR"):
        candidates.append(pathlib.Path(os.environ["NUMBA_CACHE_DIR"]) / "attndyn_kernels")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates.append(pathlib.Path(xdg) / "attndyn" / "kernels")
    candidates.append(pathlib.Path(tempfile.gettempdir()) / f"attndyn_kernels_{os.getuid()}")
    for folder in candidates:
        if _safe_folder(folder):
            return folder
    return None


def _write_once(path: pathlib.Path, text: str) -> None:
    """Create ``path`` with ``text`` atomically unless it exists; never overwrite (see the module docstring). The
    file is private to this user (mode 0600 from ``mkstemp``): it is code that will be imported.
    """
    if path.exists():
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process won the race with the same content (checked before import)
    finally:
        os.unlink(tmp)


def _trusted(path: pathlib.Path, text: str) -> bool:
    """True when ``path`` is a regular file (not a link) owned by this user, writable by no one else, whose bytes
    are exactly ``text`` (the source this process generated, whose SHA-256 prefix is in the file name).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return False
        return fh.read() == text.encode()


def _load_cached(kind: str, funcs, tableau, source: str):
    """Import the generated kernel module from the kernel folder, writing it first if needed; falls back to an
    in-memory compile (no disk cache) when no safe folder exists or the file there is not the expected one.
    """
    folder = kernel_dir()
    if folder is None:
        warnings.warn(
            "no private kernel folder (owned by this user, writable only by this user) among "
            "$ATTNDYN_KERNEL_DIR, $NUMBA_CACHE_DIR/attndyn_kernels, ~/.cache/attndyn/kernels and the "
            "temporary folder: engine kernels are compiled in memory in every process; set "
            "ATTNDYN_KERNEL_DIR to a private folder",
            RuntimeWarning,
            stacklevel=4,
        )
        return _compile_in_memory(funcs, source)
    digest = _digest(funcs, tableau, source)
    method = "" if tableau is None else f"_{tableau.name}"
    label = "__".join(f.py_func.__name__ for f in funcs)
    name = f"attndyn_{kind}{method}_{label}_{digest[:20]}"
    path = folder / f"{name}.py"
    targets = ", ".join(f"{f.py_func.__module__}.{f.py_func.__qualname__}" for f in funcs)
    imports = "".join(
        f"{g} = resolve_model({f.py_func.__module__!r}, {f.py_func.__qualname__!r})\n" for g, f in zip(_GLOBALS, funcs)
    )
    text = (
        f"# Generated by dynamics._kernels for {targets}; do not edit.\n"
        + _header(True)
        + "from dynamics._kernels import resolve_model\n"
        + imports
        + source
    )
    with _LOAD_LOCK:  # threads (e.g. a Dask worker's) must not see a module before it has finished executing
        module = sys.modules.get(name)
        if module is None:
            _write_once(path, text)
            if not _trusted(path, text):
                warnings.warn(
                    f"the engine kernel file {path} is not the source this process generated, or is not "
                    "private to this user; it was not imported (the kernel is compiled in memory). Delete "
                    "the file if it is stale",
                    RuntimeWarning,
                    stacklevel=4,
                )
                return _compile_in_memory(funcs, source)
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
    return module.kernel


# ----------------------------------------------------------------------------------------------------------------
# Source generation. Kernel arguments are documented at each template; the model function is the global MODEL.


def _lit(v: float) -> str:
    return repr(float(v))


def _combo(coefs, indent: str, var: str, m: str = "m") -> str:
    """``c_0 * k0[m] + c_1 * k1[m] + ...`` over the non-zero coefficients (unrolled at generation time)."""
    terms = [f"{_lit(c)} * k{q}[{m}]" for q, c in enumerate(coefs) if c != 0.0]
    return " + ".join(terms) if terms else "0.0"


def _stages(tab, t: str, y: str, h: str, indent: str, first: bool = True) -> list[str]:
    """Lines computing the stages k0..k(s-1) of one step of size ``h`` from (t, y); stage 0 only if ``first``."""
    lines = []
    if first:
        lines.append(f"{indent}MODEL({t}, {y}, p, g, k0)")
    for s in range(1, tab.stages):
        lines.append(f"{indent}for m in range(n):")
        lines.append(f"{indent}    yt[m] = {y}[m] + {h} * ({_combo(tab.A[s][:s], indent, 'k')})")
        lines.append(f"{indent}MODEL({t} + {_lit(tab.c[s])} * {h}, yt, p, g, k{s})")
    return lines


def _rk_step(tab, t: str, y: str, h: str, out: str, indent: str) -> list[str]:
    """Lines of one explicit RK step of size ``h`` from (t, y) into ``out`` (fixed-step methods)."""
    lines = _stages(tab, t, y, h, indent)
    lines.append(f"{indent}for m in range(n):")
    lines.append(f"{indent}    {out}[m] = {y}[m] + {h} * ({_combo(tab.b, indent, 'k')})")
    return lines


def _stage_views(tab, src: str, indent: str) -> str:
    return "\n".join(f"{indent}k{q} = {src}[{q}]" for q in range(tab.stages))


def _check_source(indent: str, leave: str) -> str:
    """Lines that record status (1, k, first bad component) and ``leave`` when a component of ``buf`` is NaN or
    beyond ``bound`` (written out, not a helper call, so that a constant n unrolls the loop).
    """
    body = [
        "bad = -1",
        "for m in range(n):",
        "    if bad < 0 and not abs(buf[m]) <= bound:",
        "        bad = m",
        "if bad >= 0:",
        "    status[i, 0] = 1",
        "    status[i, 1] = k",
        "    status[i, 2] = bad",
        f"    {leave}",
    ]
    return "\n".join(indent + line for line in body)


_GRID = '''
@njit(cache=CACHE, fastmath=False)
def kernel({args}):
    """{doc}
{obs_doc}
    Saves j >= j_start with save_k[j] in [k_start, k_end] are written into Y[i, j] inside the loop; inactive
    (stopped) trajectories keep their state and have their saves filled with it. last[i] receives the max-norm of
    the vector field at the grid state reached (k_end, or the grid point where the trajectory stopped).

    Convergence trend, sampled inside the loop: S[i, b] is the max-norm of the vector field at the grid point TP[b]
    (sorted) for the tail points in (k_start, k_end], and XM[i] the state at TP[0]; a stopped trajectory's frozen
    state stands for the grid points after it stopped (its last[i])."""
    n_traj = X.shape[0]
    n = {n_state}
    n_save = save_k.shape[0]
    shared = P.shape[0] == 1
    n_tp = TP.shape[0]
    kmid = TP[0] if n_tp > 0 else -1
{views}
    for i in range(n_traj):
        if status[i, 0] != 0:
            continue
        x = X[i]
        p = P[0] if shared else P[i]
        g = args_row(A, i)
        j = j_start
        tp = 0
        while tp < n_tp and TP[tp] <= k_start:
            tp += 1
        if not active[i] and k_start < kmid <= k_end:
            for m in range(n):
                XM[i, m] = x[m]
        if active[i]:
            k = k_start
            while True:
                while j < n_save and save_k[j] == k:
                    out = Y[i, j]
{save}
{obs_save}                    j += 1
                if status[i, 0] != 0 or k == k_end:
                    break
{step}
                k += 1
{check}
                if tol < 0.0:
                    for m in range(n):
                        v = buf[m]
                        if flush and abs(v) < 2.2250738585072014e-308:
                            v = v * 0.0
                        x[m] = v
                elif commit_moved(x, buf, flush) < {tol}:
                    active[i] = False
                    stop_at[i] = {stop_value}
                    break
                if tp < n_tp and TP[tp] == k:  # a tail point of the convergence trend: |f| there
                    MODEL(t0 + k * dt, x, p, g, buf)
                    fmax = 0.0
                    for m in range(n):
                        fmax = max(fmax, abs(buf[m]))
                    S[i, tp] = fmax
                    tp += 1
                    if k == kmid:
                        for m in range(n):
                            XM[i, m] = x[m]
            if status[i, 0] == 0:  # size of the vector field at the state reached (last[i])
                MODEL(t0 + k * dt, x, p, g, buf)
                fmax = 0.0
                for m in range(n):
                    fmax = max(fmax, abs(buf[m]))
                last[i] = fmax
                if not active[i] and k <= kmid <= k_end:  # stopped at k: the frozen state stands for kmid
                    for m in range(n):
                        XM[i, m] = x[m]
        if status[i, 0] == 0:  # tail points not reached by a step (the trajectory stopped): its frozen |f|
            while tp < n_tp and TP[tp] <= k_end:
                S[i, tp] = last[i]
                tp += 1
        if status[i, 0] == 0 and not active[i]:
            j0 = j
            j = fill_frozen(Y[i], j, save_k, k_end, x)
{frozen}        status[i, 3] = j
'''

_COPY_SAVE = """                    for m in range(n):
                        out[m] = x[m]"""

# Steps of a lane pair between two checks of their flags (bounds the work redone after a flagged block).
PAIR_BLOCK = 512

_MAP = '''
@njit(cache=CACHE, fastmath=False)
def run_one(x, p, g, i, k, kb, k_end, j, save_k, Y, O, active, status, bound, tol, stop_at, flush, last, buf, pend,
            TL, TH, S, XM, kmid):
    """Steps k -> kb of trajectory i (state x, parameters p) with every check made after every step; writes the
    saves due at steps in (k, kb] (and, when the trajectory stops, its frozen state into the saves up to k_end).
    Records the size of the step into k_end in last[i], the step sizes of the tail blocks in S[i] and the state at
    step kmid in XM[i] (see the kernel). ``pend`` >= 0 is a save of the state at step k whose observables the next
    (fused) step writes. Returns (next save index, still running, pending save or -1)."""
    n = {n_one}
    n_save = save_k.shape[0]
    nb = TL.shape[0]
    t_lo = TL[0] if nb > 0 else 1
    t_hi = TH[nb - 1] if nb > 0 else 0
    while k < kb:
{step_run}        k += 1
{check}
        moved = 0.0
        for m in range(n):
            v = buf[m]
            if flush and abs(v) < 2.2250738585072014e-308:
                v = v * 0.0
            dv = abs(v - x[m])
            if dv > moved:
                moved = dv
            x[m] = v
        if k == k_end:
            last[i] = moved
        if t_lo <= k <= t_hi:
            tail_add(S[i], TL, TH, k, k, moved)
        if k == kmid:
            for m in range(n):
                XM[i, m] = x[m]
        if moved < tol:
            active[i] = False
            stop_at[i] = k
            last[i] = moved
            # a stopped trajectory's step size stands for the steps left in this call (as if sampled there)
            tail_add(S[i], TL, TH, k + 1, k_end, moved)
            if k < kmid and kmid <= k_end:
                for m in range(n):
                    XM[i, m] = x[m]
            j0 = j
            j = fill_frozen(Y[i], j, save_k, k_end, x)
{frozen_run}            return j, False, -1
        while j < n_save and save_k[j] == k:
            out = Y[i, j]
            for m in range(n):
                out[m] = x[m]
{obs_run}            j += 1
    return j, True, pend


@njit(cache=CACHE, fastmath=False)
def kernel(X, P, k_start, k_end, save_k, j_start, Y, O, active, status, bound, tol, stop_at, flush, last, W, WO,
           TL, TH, TC, S, XM, kmid, A):
    """Advance each trajectory by the map MODEL from step k_start to k_end.
{obs_doc}
    Saves j >= j_start with save_k[j] in [k_start, k_end] are written into Y[i, j] inside the loop; inactive
    (stopped) trajectories keep their state and have their saves filled with it. last[i] receives the max-norm
    size of the step into k_end (or of the step at which the trajectory stopped).

    Trajectories run in pairs (2i, 2i+1) whose steps are interleaved, so that the two independent dependency
    chains overlap in the CPU (a step of one trajectory is a serial chain of latencies). Inside a block of at most
    {block} steps, ending before the next save point and before the last step, a pair records in one flag per
    trajectory whether any step produced a value that is NaN or beyond the bound, or (with tol) a step smaller than
    tol; a flagged trajectory is set back to the block's start and the block is run again by run_one, which makes
    every check after every step, so the reported step and variable and all results are those of one-at-a-time
    runs, bit for bit. The last step of each trajectory is always taken by run_one (it records last[i]).

    Convergence trend, sampled inside the loop: S[i, b] is the largest step size max_m |x_k - x_(k-1)|_m over the
    steps k in [TL[b], TH[b]] (tail block b) run by this call (a stopped trajectory contributes its last step size
    last[i] for the steps after it stopped), XM[i] the state at step kmid. Pair blocks are cut at the points TC
    (TL - 1 and TH), so every step of a block lies in the same tail blocks; their sizes are folded into S only
    when the block is not run again."""
    n_traj = X.shape[0]
    n = {n_state}
    n_save = save_k.shape[0]
    shared = P.shape[0] == 1
    ba = W[0]
    bb = W[1]
    sa = W[2]
    sb = W[3]
    oa = WO[0]  # observables of a fused step, copied into O (no array view made per step)
    ob = WO[1]
    use_tol = tol >= 0.0
    n_cut = TC.shape[0]
    for i in range(n_traj):  # trajectories stopped before this call: their last step size stands for these steps
        if status[i, 0] == 0 and not active[i]:
            tail_add(S[i], TL, TH, k_start + 1, k_end, last[i])
            if k_start < kmid and kmid <= k_end:
                for m in range(n):
                    XM[i, m] = X[i, m]
    for a in range(0, n_traj, 2):
        b = a + 1
        oka = status[a, 0] == 0  # trajectories that failed in an earlier call are left as they are
        okb = b < n_traj and status[b, 0] == 0
        ra = oka and active[a]
        rb = okb and active[b]
        k = k_start
        j = j_start
        qa = -1  # per lane: a save at step k whose observables the next (fused) step writes, or -1
        qb = -1
        while j < n_save and save_k[j] == k:
            for i in range(a, min(b + 1, n_traj)):
                if status[i, 0] == 0:  # a stopped trajectory saves its frozen state
                    for m in range(n):
                        Y[i, j, m] = X[i, m]
{obs_init}            j += 1
        ja = j
        jb = j
        xa = X[a]
        pa = P[0] if shared else P[a]
        ga = args_row(A, a)
        xb = X[b if b < n_traj else a]
        pb = P[0] if shared else P[b if b < n_traj else a]
        gb = args_row(A, b if b < n_traj else a)
        tc = 0
        while ra and rb and k < k_end - 1:
            kn = min(k + {block}, k_end - 1)
            if ja < n_save and save_k[ja] < kn:
                kn = save_k[ja]
            while tc < n_cut and TC[tc] <= k:
                tc += 1
            if tc < n_cut and TC[tc] < kn:
                kn = TC[tc]
            intail = in_tail(TL, TH, kn)  # the steps (k, kn] all lie in the same tail blocks
            track = use_tol or intail
            ta = -1.0
            tb = -1.0
            # the state at the block's start, to restart a flagged block from: the save just written at step k
            # when there is one (with dense saves, every block), else a copy
            at_a = ja > 0 and save_k[ja - 1] == k
            at_b = jb > 0 and save_k[jb - 1] == k
            if not at_a:
                for m in range(n):
                    sa[m] = xa[m]
            if not at_b:
                for m in range(n):
                    sb[m] = xb[m]
            fa = False
            fb = False
            q0a = qa
            q0b = qb
            kk = k
            while kk < kn:
{step_a}{step_b}                kk += 1
                ma = 0.0
                mb = 0.0
{commit_a}{commit_b}                if use_tol:
                    fa |= ma < tol
                    fb |= mb < tol
                if ma > ta:
                    ta = ma
                if mb > tb:
                    tb = mb
{end_a}{end_b}            k = kn
{tail_a}{tail_b}{fin_a}{fin_b}'''


# Per-lane pieces of the pair loop of _MAP, written once for lane "a" and renamed for lane "b" (trajectory index,
# state x_, parameters p_, buffer b_, block start s_, flag f_, step size m_, save index j_, running r_, ok_).
_LANE = {
    "commit": """                for m in range(n):
                    v = b@[m]
                    f@ |= not abs(v) <= bound
                    if flush and abs(v) < 2.2250738585072014e-308:
                        v = v * 0.0
                    if track:
                        m@ = max(m@, abs(v - x@[m]))
                    x@[m] = v
""",
    "end": """            if f@:
                if at_@:
                    for m in range(n):
                        x@[m] = Y[@, j@ - 1, m]
                else:
                    for m in range(n):
                        x@[m] = s@[m]
                j@, r@, q@ = run_one(x@, p@, g@, @, k, kn, k_end, j@, save_k, Y, O, active, status, bound, tol,
                                     stop_at, flush, last, b@, q0@, TL, TH, S, XM, kmid)
            else:
                if intail:
                    tail_add(S[@], TL, TH, kn, kn, t@)
                if kn == kmid:
                    for m in range(n):
                        XM[@, m] = x@[m]
                while j@ < n_save and save_k[j@] == kn:
                    for m in range(n):
                        Y[@, j@, m] = x@[m]
{obs_end}                    j@ += 1
""",
    "tail": """        if r@:
            j@, r@, q@ = run_one(x@, p@, g@, @, k, k_end, k_end, j@, save_k, Y, O, active, status, bound, tol,
                                 stop_at, flush, last, b@, q@, TL, TH, S, XM, kmid)
""",
    "fin": """        if ok@:
            if status[@, 0] == 0 and not active[@]:
                j0 = j@
                j@ = fill_frozen(Y[@], j@, save_k, k_end, x@)
{frozen_fin}            status[@, 3] = j@
""",
}


def _obs_frozen(indent: str, Oi: str, x: str, p: str, when: str, j: str = "j", g: str = "g") -> str:
    """Lines evaluating OBS on the frozen state ``x`` for the saves j0..``j``-1 just filled by ``fill_frozen``."""
    return f"{indent}for q in range(j0, {j}):\n{indent}    OBS({when}, {x}, {p}, {g}, {Oi}[q])\n"


_OBS_DOC = """
    Observables: OBS(k, x, p, g, O[i, j]) is evaluated on the state of every save j (also the frozen ones).
"""


_FUSED_DOC = """
    Fused observables: the observables of a save at step k < k_end of a running trajectory are written by the step
    taken from it, FUSED(k, x, p, g, out, O[i, j]) (the step and the observables of x in one pass, sharing their
    work); saves at k_end and frozen saves use OBS(k, x, p, g, O[i, j]).
"""

# The map kernel's save and step pieces: without observables, with OBS at every save, and with a fused step.
_MAP_OBS = {
    "step_run": ("        MODEL(k, x, p, g, buf)\n",) * 2
    + (
        """        if pend >= 0:
            FUSED(k, x, p, g, buf, O[i, pend])
            pend = -1
        else:
            MODEL(k, x, p, g, buf)
""",
    ),
    "obs_run": (
        "",
        "            OBS(k, x, p, g, O[i, j])\n",
        """            if k < k_end:
                pend = j
            else:
                OBS(k, x, p, g, O[i, j])
""",
    ),
    "obs_init": (
        "",
        "                    OBS(k, X[i], P[0] if shared else P[i], args_row(A, i), O[i, j])\n",
        """                    if k < k_end and active[i]:
                        if i == a:
                            qa = j
                        else:
                            qb = j
                    else:
                        OBS(k, X[i], P[0] if shared else P[i], args_row(A, i), O[i, j])
""",
    ),
    "obs_end": (
        "",
        "                    OBS(kn, x@, p@, g@, O[@, j@])\n",
        "                    q@ = j@  # kn < k_end\n",
    ),
    "step": ("                MODEL(kk, x@, p@, g@, b@)\n",) * 2
    + (
        """                if q@ >= 0:
                    FUSED(kk, x@, p@, g@, b@, o@)
                    for m in range(o@.shape[0]):
                        O[@, q@, m] = o@[m]
                    q@ = -1
                else:
                    MODEL(kk, x@, p@, g@, b@)
""",
    ),
}


def _map_source(tableau, n_state, obs: bool = False, fused: bool = False) -> str:
    n_one = "x.shape[0]" if n_state == "X.shape[1]" else n_state
    level = 2 if fused else int(obs)
    fill = {key: texts[level] for key, texts in _MAP_OBS.items()}
    fill["obs_doc"] = ("", _OBS_DOC, _OBS_DOC + _FUSED_DOC)[level]
    frozen = _obs_frozen(" " * 12, "O[i]", "x", "p", "save_k[q]") if obs else ""
    lane = {
        "obs_end": fill.pop("obs_end"),
        "step": fill.pop("step"),
        "frozen_fin": _obs_frozen(" " * 16, "O[@]", "x@", "p@", "save_k[q]", "j@", "g@") if obs else "",
    }
    texts = dict(_LANE, step="{step}")
    pieces = {f"{part}_{ln}": text.format(**lane).replace("@", ln) for part, text in texts.items() for ln in "ab"}
    return _MAP.format(
        n_state=n_state,
        n_one=n_one,
        block=PAIR_BLOCK,
        frozen_run=frozen,
        check=_check_source(" " * 8, "return j, False, -1"),
        **pieces,
        **fill,
    )


def _fixed_source(tab, n_state, obs: bool = False) -> str:
    partial = "\n".join(_rk_step(tab, "tk", "x", "hs", "out", " " * 24))
    save = f"""                    hs = save_h[j]
                    if hs == 0.0:
    {_COPY_SAVE.replace(chr(10), chr(10) + "    ")}
                    else:
                        tk = t0 + k * dt
{partial}
                        bad = first_bad(out, bound)
                        if bad >= 0:
                            status[i, 0] = 1
                            status[i, 1] = k + 1
                            status[i, 2] = bad
                            break"""
    step = "                t = t0 + k * dt\n" + "\n".join(_rk_step(tab, "t", "x", "dt", "buf", " " * 16))
    obs_save = "                    OBS(t0 + k * dt + save_h[j], out, p, g, O[i, j])\n" if obs else ""
    frozen = _obs_frozen(" " * 12, "O[i]", "x", "p", "t0 + save_k[q] * dt + save_h[q]") if obs else ""
    return _GRID.format(
        obs_save=obs_save,
        frozen=frozen,
        obs_doc=_OBS_DOC if obs else "",
        check=_check_source(" " * 16, "break"),
        n_state=n_state,
        args="X, P, t0, dt, k_start, k_end, save_k, save_h, j_start, Y, O, active, status, bound, tol, stop_at, "
        "flush, last, K, yt, buf, TP, S, XM, A",
        doc=f"{tab.name} on the grid t0 + k dt from grid index k_start to k_end (times never accumulated); a save "
        "between grid points is a partial step save_h[j] from grid point save_k[j].",
        views=_stage_views(tab, "K", "    "),
        save=save,
        step=step,
        tol="tol * dt",
        stop_value="t0 + k * dt",
    )


def _adaptive_source(tab, n_state, obs: bool = False) -> str:
    obs_save = "\n                    OBS(save_t[j], out, p, g, O[i, j])" if obs else ""
    obs_frozen = "\n                OBS(save_t[j], y, p, g, O[i, j])" if obs else ""
    obs_doc = _OBS_DOC if obs else ""
    s_last = tab.stages - 1
    inv = 1.0 / tab.order
    exponent = 1.0 / (tab.err_order + 1)
    err_terms = _combo(tab.e, "", "k")
    dense_stages = [q for q, d in enumerate(tab.dense) if any(v != 0.0 for v in d)]
    dense_weights = "\n".join(
        f"                        b{q}t = theta * ({_lit(d[0])} + theta * ({_lit(d[1])} + theta * ({_lit(d[2])} "
        f"+ theta * {_lit(d[3])})))"
        for q, d in enumerate(tab.dense)
        if q in dense_stages
    )
    dense_terms = " + ".join(f"b{q}t * k{q}[m]" for q in dense_stages)
    first_stage = (
        "                for m in range(n):\n                    k0[m] = F0[i, m]"
        if tab.fsal
        else "                MODEL(t, y, p, g, k0)"
    )
    stages = "\n".join(_stages(tab, "t", "y", "h", " " * 16, first=False))
    if tab.fsal:
        new_state = "                for m in range(n):\n                    ynew[m] = yt[m]  # the last stage point"
        f_new = f"k{s_last}"
    else:
        new_state = (
            f"                for m in range(n):\n                    ynew[m] = y[m] + h * ({_combo(tab.b, '', 'k')})"
        )
        f_new = None
    fsal_update = (
        f"                    for m in range(n):\n                        F0[i, m] = {f_new}[m]"
        if f_new
        else "                    MODEL(T[i], y, p, g, F0[i])"
    )
    return f'''
@njit(cache=CACHE, fastmath=False)
def initial_step(t, y, p, g, f0, rtol, atol, y1, f1):
    """Initial step size of Hairer, Nørsett & Wanner (Solving ODEs I, Sec. II.4), for order {tab.order}."""
    d0 = rms_scaled(y, y, atol, rtol)
    d1 = rms_scaled(f0, y, atol, rtol)
    if d0 < 1e-5 or d1 < 1e-5:
        h0 = 1e-6
    else:
        h0 = 0.01 * d0 / d1
    if not 0.0 < h0 < 1.7976931348623157e308:  # the field's scale overflows the error norm: a step-size underflow
        return 0.0
    for m in range(y.shape[0]):
        y1[m] = y[m] + h0 * f0[m]
    MODEL(t + h0, y1, p, g, f1)
    for m in range(y.shape[0]):
        y1[m] = f1[m] - f0[m]
    d2 = rms_scaled(y1, y, atol, rtol) / h0
    if max(d1, d2) <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** {_lit(inv)}
    return min(100.0 * h0, h1)


@njit(cache=CACHE, fastmath=False)
def kernel(X, P, T, H, F0, K, Yold, Told, Hold, fresh, save_t, j_start, j_end, t_end, rtol, atol, dt_max,
           max_steps, nsteps, NS, active, status, bound, tol, stop_at, flush, Y, O, yt, ynew, w0,
           w1, PB, S, A):
    """Adaptive {tab.name}: advance each trajectory until the saves j_start..j_end-1 are written (dense output
    at save_t[j]; steps are clipped only at t_end, so saving never changes the step sequence).

    Kept between calls per trajectory: time T, proposed step H, F0 = f(T, X), the stages K of the last accepted
    step with its start (Yold, Told, Hold; Hold = 0 before the first step), fresh (1 until initialised) and the
    number of attempted steps nsteps (written to NS[i, j] at each save).

    Convergence trend, sampled inside the loop: a save j with PB[j] >= 0 is a probe, and S[i, PB[j]] receives the
    max-norm of F0[i] when it is written (the vector field at the solver's state just past the probe time; the
    frozen state's for a stopped trajectory).
{obs_doc}"""
    n_traj, n = X.shape
    shared = P.shape[0] == 1
    for i in range(n_traj):
        if status[i, 0] != 0:
            continue
        y = X[i]
        p = P[0] if shared else P[i]
        g = args_row(A, i)
        j = j_start
        if active[i]:
            Ki = K[i]
{_stage_views(tab, "Ki", "            ")}
            if fresh[i] == 1:
                MODEL(T[i], y, p, g, F0[i])
                bad = first_bad(F0[i], 1.7976931348623157e308)
                if bad >= 0:  # the vector field itself is non-finite at the start
                    status[i, 0] = 1
                    status[i, 1] = 0
                    status[i, 2] = bad
                    status[i, 3] = j
                    continue
                if H[i] <= 0.0:
                    H[i] = initial_step(T[i], y, p, g, F0[i], rtol, atol, w0, w1)
                fresh[i] = 0
            rejected_last = False
            converged = False
            while True:
                while j < j_end and save_t[j] <= T[i]:
                    out = Y[i, j]
                    if save_t[j] == T[i] or Hold[i] == 0.0:
                        for m in range(n):
                            out[m] = y[m]
                    else:
                        theta = (save_t[j] - Told[i]) / Hold[i]
{dense_weights}
                        for m in range(n):
                            out[m] = Yold[i, m] + Hold[i] * ({dense_terms})
                    NS[i, j] = nsteps[i]{obs_save}
                    if PB[j] >= 0:
                        S[i, PB[j]] = max_abs(F0[i])
                    j += 1
                if converged:
                    active[i] = False
                    stop_at[i] = T[i]
                    break
                if j >= j_end:
                    break
                if nsteps[i] >= max_steps:
                    status[i, 0] = 2
                    status[i, 1] = nsteps[i]
                    break
                t = T[i]
                h = min(H[i], dt_max)
                if t + 1.000001 * h >= t_end:
                    h = t_end - t  # the last step lands on t_end (stretched by at most 1e-6 h, never a sliver)
                if h <= 1e-14 * max(abs(t), 1.0):
                    status[i, 0] = 3
                    status[i, 1] = nsteps[i]
                    status[i, 2] = np.argmax(np.abs(F0[i]))  # the fastest-moving component, as a hint
                    break
{first_stage}
{stages}
{new_state}
                s = 0.0
                finite = True
                for m in range(n):
                    e = h * ({err_terms})
                    sc = atol + rtol * max(abs(y[m]), abs(ynew[m]))
                    s += (e / sc) ** 2
                    if is_bad(ynew[m], bound) or is_bad(k{s_last}[m], 1.7976931348623157e308):
                        finite = False
                err = np.sqrt(s / n)
                nsteps[i] += 1
                if finite and err <= 1.0:
                    for m in range(n):
                        Yold[i, m] = y[m]
                    Told[i] = t
                    Hold[i] = h
                    moved = commit_moved(y, ynew, flush)
                    T[i] = t_end if h == t_end - t else t + h
{fsal_update}
                    H[i] = h * step_factor(err, True, rejected_last, {_lit(exponent)})
                    rejected_last = False
                    converged = moved < tol * h
                else:
                    if not finite:
                        fac = 0.2
                        if h <= 1e-10 * max(abs(t), 1.0):
                            status[i, 0] = 1
                            status[i, 1] = nsteps[i]
                            status[i, 2] = max(first_bad(ynew, bound), 0)
                            break
                    else:
                        fac = step_factor(err, False, rejected_last, {_lit(exponent)})
                    H[i] = h * fac
                    rejected_last = True
        if status[i, 0] == 0 and not active[i]:
            while j < j_end:
                for m in range(n):
                    Y[i, j, m] = y[m]
                NS[i, j] = nsteps[i]{obs_frozen}
                if PB[j] >= 0:
                    S[i, PB[j]] = max_abs(F0[i])
                j += 1
        status[i, 3] = j
'''


_SOURCES = {"map": _map_source, "fixed": _fixed_source, "adaptive": _adaptive_source}
