"""Device selectors in the Common Expression Language, evaluated as kube-scheduler does.

A DeviceClass or ResourceClaim picks devices with CEL expressions over ``device`` (driver,
attributes, capacity). gpupool evaluates them with a real CEL runtime (cel-expr-python,
the CEL project's C++ implementation) instead of a hand-written subset, in the environment
Kubernetes gives selectors (``k8s.io/dynamic-resource-allocation/cel``): the CEL standard
library, the string extensions, and Kubernetes' ``quantity`` and ``semver`` libraries, with
version attributes as semver values and capacities as quantities.

CEL has no way to carry a Python object, so a quantity is a one-entry map
``{"k8s.io/Quantity": "<numerator>/<denominator>"}`` (exact and canonical, so ``==`` compares
values as Kubernetes' Quantity equality does) and a version ``{"k8s.io/Semver": "1.2.3"}``;
the library functions below take and return those maps.

Pure computation: compiling and evaluating touch no I/O. A selector that does not compile
here (a function a newer Kubernetes added, say) is reported as such, and callers treat it as
doubt, never as a reason to deny.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, NamedTuple

QUANTITY_KEY = "k8s.io/Quantity"
SEMVER_KEY = "k8s.io/Semver"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
            "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
            "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18)}
_QUANTITY = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|([A-Za-z]{0,2}))$")
_SEMVER = re.compile(r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


class CELError(ValueError):
    """An expression that does not compile, or a value a library function refuses."""


# --------------------------------------------------------------------------- quantities


def parse_quantity(text: str) -> Fraction:
    """A Kubernetes quantity (``resource.MustParse`` syntax) as an exact number."""
    m = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise CELError(f"{text!r} is not a quantity")
    sign, number, exponent, suffix = m.groups()
    value = Fraction(number)
    if exponent:
        e = int(exponent[1:])
        value *= Fraction(10**e) if e >= 0 else Fraction(1, 10**-e)
    elif suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:
        raise CELError(f"{text!r} is not a quantity (unknown suffix {suffix!r})")
    return -value if sign == "-" else value


def quantity_value(value: Fraction) -> dict[str, str]:
    return {QUANTITY_KEY: f"{value.numerator}/{value.denominator}"}


def quantity(text: str) -> dict[str, str]:
    """A quantity as a CEL value (what ``quantity('40Gi')`` returns)."""
    return quantity_value(parse_quantity(text))


def _q(value: Any) -> Fraction:
    if isinstance(value, Mapping) and QUANTITY_KEY in value:
        return Fraction(str(value[QUANTITY_KEY]))
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    raise CELError(f"not a quantity: {value!r}")


# --------------------------------------------------------------------------- versions


def parse_semver(text: str, normalize: bool = False) -> tuple[int, int, int, str]:
    """A semantic version (strict, as Kubernetes' ``semver()``; ``normalize`` accepts a
    leading v and missing minor/patch)."""
    s = text.strip() if isinstance(text, str) else ""
    if normalize:
        s = s[1:] if s.startswith("v") else s
        core, sep, rest = s.partition("-") if "-" in s else s.partition("+")
        parts = core.split(".")
        while len(parts) < 3:
            parts.append("0")
        s = ".".join(str(int(p)) if p.isdigit() else p for p in parts) + (sep + rest if sep
                                                                              else "")
    elif s.startswith("v"):
        s = "!"  # strict semver has no leading v
    m = _SEMVER.match(s)
    if m is None:
        raise CELError(f"{text!r} is not a semantic version")
    return int(m[1]), int(m[2]), int(m[3]), m[4] or ""


def semver_value(text: str, normalize: bool = False) -> dict[str, str]:
    major, minor, patch, pre = parse_semver(text, normalize)
    return {SEMVER_KEY: f"{major}.{minor}.{patch}" + (f"-{pre}" if pre else "")}


def _v(value: Any) -> tuple[int, int, int, str]:
    if isinstance(value, Mapping) and SEMVER_KEY in value:
        return parse_semver(str(value[SEMVER_KEY]))
    raise CELError(f"not a version: {value!r}")


def _pre_key(pre: str) -> tuple[Any, ...]:
    """Semver precedence of pre-release tags: none sorts after any."""
    if not pre:
        return (1,)
    return (0, *((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")))


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Mapping) and SEMVER_KEY in a:
        va, vb = _v(a), _v(b)
        ka, kb = (va[:3], _pre_key(va[3])), (vb[:3], _pre_key(vb[3]))
    else:
        ka, kb = _q(a), _q(b)  # type: ignore[assignment]  # both sides Fractions here
    return (ka > kb) - (ka < kb)


def _is(parse: Callable[..., Any]) -> Callable[..., bool]:
    def check(text: str, *normalize: bool) -> bool:
        try:
            parse(text, *normalize)
        except CELError:
            return False
        return True
    return check


# --------------------------------------------------------------------------- environment


@functools.cache
def _env() -> Any:
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings

    T = cel.Type
    M, D, S, N, B = T.MAP, T.DYN, T.STRING, T.INT, T.BOOL

    def fn(name: str, *overloads: tuple[str, Any, list[Any], bool, Callable[..., Any]]
           ) -> Any:
        return cel.FunctionDecl(name, [
            cel.Overload(oid, return_type=ret, parameters=params, is_member=member, impl=impl)
            for oid, ret, params, member, impl in overloads])

    functions = [
        fn("quantity", ("quantity_string", M, [S], False, quantity)),
        fn("isQuantity", ("isQuantity_string", B, [S], False, _is(parse_quantity))),
        fn("semver", ("semver_string", M, [S], False, semver_value),
           ("semver_string_bool", M, [S, B], False, semver_value)),
        fn("isSemver", ("isSemver_string", B, [S], False, _is(parse_semver)),
           ("isSemver_string_bool", B, [S, B], False, _is(parse_semver))),
        fn("compareTo", ("compareTo_map", N, [M, M], True, _compare)),
        fn("isGreaterThan", ("isGreaterThan_map", B, [M, M], True,
                             lambda a, b: _compare(a, b) > 0)),
        fn("isLessThan", ("isLessThan_map", B, [M, M], True, lambda a, b: _compare(a, b) < 0)),
        fn("sign", ("sign_map", N, [M], True, lambda a: (_q(a) > 0) - (_q(a) < 0))),
        fn("isInteger", ("isInteger_map", B, [M], True, lambda a: _q(a).denominator == 1)),
        fn("asInteger", ("asInteger_map", N, [M], True, _as_integer)),
        fn("asApproximateFloat", ("asApproximateFloat_map", T.DOUBLE, [M], True,
                                  lambda a: float(_q(a)))),
        fn("add", ("add_map_map", M, [M, M], True, lambda a, b: quantity_value(_q(a) + _q(b))),
           ("add_map_int", M, [M, N], True, lambda a, b: quantity_value(_q(a) + b))),
        fn("sub", ("sub_map_map", M, [M, M], True, lambda a, b: quantity_value(_q(a) - _q(b))),
           ("sub_map_int", M, [M, N], True, lambda a, b: quantity_value(_q(a) - b))),
        fn("major", ("major_map", N, [M], True, lambda a: _v(a)[0])),
        fn("minor", ("minor_map", N, [M], True, lambda a: _v(a)[1])),
        fn("patch", ("patch_map", N, [M], True, lambda a: _v(a)[2])),
    ]
    return cel.NewEnv(variables={"device": D}, extensions=[ext_strings.ExtStrings()],
                      functions=functions)


def _as_integer(a: Any) -> int:
    value = _q(a)
    if value.denominator != 1 or not -(2**63) <= value.numerator < 2**63:
        raise CELError("quantity is not an integer that fits in int64")
    return value.numerator


class Selector(NamedTuple):
    """A compiled selector; ``error`` says why it did not compile (then it never matches,
    and the caller treats its pods with doubt)."""

    text: str
    program: Any
    error: str
    #: (map, domain) pairs the expression names literally (``device.attributes['x']``): a
    #: device without that domain gets an empty map there, as Kubernetes gives it
    domains: tuple[tuple[str, str], ...] = ()


@functools.lru_cache(maxsize=1024)
def compile_selector(text: str) -> Selector:
    """Compile once per distinct expression (every pod of a workload repeats its claim's)."""
    try:
        program = _env().compile(text)
    except RuntimeError as exc:
        return Selector(text, None, _first_line(exc))
    kind = program.return_type()
    from cel_expr_python import cel
    if kind != cel.Type.BOOL and kind != cel.Type.DYN:
        return Selector(text, None, f"the expression returns {kind.name()}, not a boolean")
    return Selector(text, program, "", tuple(sorted(
        {(part, literal[1:-1]) for part, literal in _DOMAIN.findall(text)})))


def evaluate(selector: Selector, device: Mapping[str, Any]) -> bool | str:
    """True or False as the selector judges ``device``; a string is the runtime error that
    kept it from judging (a missing attribute, a non-boolean result)."""
    if selector.program is None:
        return selector.error
    from cel_expr_python import cel
    absent = [(part, d) for part, d in selector.domains if d not in device.get(part, {})]
    if absent:
        # Kubernetes' attribute and capacity maps answer an unknown domain with an empty
        # map (k8s.io/dynamic-resource-allocation v0.35.4 cel/compile.go,
        # newStringInterfaceMapWithDefault), so size() is 0 and has() is false there.
        device = {**device, **{part: {**device.get(part, {}),
                                      **{d: {} for p, d in absent if p == part}}
                               for part in {p for p, _ in absent}}}
    try:
        out = selector.program.eval(data={"device": device})
    except RuntimeError as exc:
        return _first_line(exc)
    result = out.value()
    if out.type() == cel.Type.ERROR:
        return str(result).strip().splitlines()[0] if str(result).strip() else "error"
    if not isinstance(result, bool):
        return f"the expression returned {type(result).__name__}, not a boolean"
    return result


_DOMAIN = re.compile(r"device\.(attributes|capacity)\s*\[\s*('[^']*'|\"[^\"]*\")\s*\]")
_TOKENS = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|([A-Za-z_][A-Za-z0-9_]*)")
#: Macros and functions that read a map's keys without naming them: a selector using any
#: of them may depend on any field.
_ENUMERATING = frozenset({"all", "exists", "exists_one", "map", "filter", "size", "keys",
                          "values"})
_WHOLE_MAP = re.compile(r"device\.(attributes|capacity)\s*(\[\s*('[^']*'|\"[^\"]*\")\s*\]"
                        r"\s*)?(?![\s.\[]|\s*\[)")


@functools.lru_cache(maxsize=1024)
def referenced_names(texts: tuple[str, ...]) -> frozenset[str] | None:
    """Every name these selectors could read a device field by (identifiers and string
    literals in their text), or None when they could read fields they do not name: a
    macro or function that enumerates a map, a whole attributes map compared or passed on,
    or a string built at run time (``+``). Devices equal in every named field are then
    judged alike."""
    names: set[str] = set()
    for text in texts:
        if "+" in text or _WHOLE_MAP.search(text):
            return None
        for single, double, ident in _TOKENS.findall(text):
            word = ident or single or double
            if ident in _ENUMERATING:
                return None
            names.add(word)
    return frozenset(names)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
