"""Static scans of the service's source: every member an error body can carry, and every header
a response can be given.

The release inventory's tests run them over app/ (and worker/), and over a snippet of source to
show a planted release is found (``test_inventory_injection.py``): each scan takes (label, text)
pairs, never reads what it is not given. A name the scan cannot read statically (a non-literal
key, a ``**mapping`` built at run time) is reported with its place, never skipped: the build
fails until the code says its names in literals (or through a helper whose returned literal
dicts the scan reads).
"""

import ast
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
Source = tuple[str, str]
"""(label used in messages, e.g. "app/api/jobs.py"; the source text)."""
OUTGOING = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "request",
                      "stream", "send", "build_request"})
"""Methods of an HTTP client: their ``headers=`` go out with a request, not on a response."""
PROBLEM_PARAMETERS = frozenset({"status", "kind", "title", "detail", "instance"})
"""``app.core.errors.problem``'s own parameters; any other keyword is a member of the body."""


def sources(*folders: str) -> list[Source]:
    """Every Python file under ``folders`` (relative to the repository root), sorted."""
    return [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
            for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]


@dataclass
class Scan:
    """Names found, each with the places that set it; places whose names cannot be read."""

    found: dict[str, list[str]] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)

    def add(self, name: str, where: str) -> None:
        self.found.setdefault(name, []).append(where)


class _Module:
    """One parsed source: parent links, module-level names and functions."""

    def __init__(self, label: str, text: str) -> None:
        self.label = label
        self.tree = ast.parse(text)
        self.parent = {child: node for node in ast.walk(self.tree)
                       for child in ast.iter_child_nodes(node)}
        self.functions = {n.name: n for n in self.tree.body
                          if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}

    def where(self, node: ast.AST) -> str:
        return f"{self.label}:{getattr(node, 'lineno', 0)}"

    def enclosing(self, node: ast.AST, kinds: tuple[type, ...]) -> ast.AST | None:
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, kinds):
                return node
        return None

    def scope(self, node: ast.AST) -> ast.AST:
        """The function around ``node``, else the module."""
        found = self.enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        return found if found is not None else self.tree


class _Resolver:
    """Reads the literal keys of a mapping expression, following names and known helpers."""

    def __init__(self, modules: list[_Module], forwarded: str) -> None:
        self.helpers = {name: (m, f) for m in modules for name, f in m.functions.items()}
        self.forwarded = forwarded  # ``x.<forwarded>`` holds names set (and scanned) elsewhere
        self._busy: set[int] = set()

    def string(self, expr: ast.expr | None, module: _Module) -> str | None:
        """A literal (str or bytes) name, or a module-level constant naming one."""
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str | bytes):
            value = expr.value
            return value.decode("latin-1") if isinstance(value, bytes) else value
        if isinstance(expr, ast.Name):
            values = _assigned(module.tree, expr.id, top_level=True)
            if len(values) == 1:
                return self.string(values[0], module)
        return None

    def keys(self, expr: ast.expr, module: _Module) -> set[str] | None:
        """The keys ``expr`` can hold; None when some cannot be read statically."""
        if id(expr) in self._busy:
            return set()
        self._busy.add(id(expr))
        try:
            return self._keys(expr, module)
        finally:
            self._busy.discard(id(expr))

    def _keys(self, expr: ast.expr, module: _Module) -> set[str] | None:
        if isinstance(expr, ast.Constant) and expr.value is None:
            return set()
        if isinstance(expr, ast.Attribute) and expr.attr == self.forwarded:
            return set()
        if isinstance(expr, ast.Dict):
            return self._union([self.keys(v, module) if k is None else _one(self.string(k, module))
                                for k, v in zip(expr.keys, expr.values, strict=True)])
        if isinstance(expr, ast.IfExp):
            return self._union([self.keys(expr.body, module), self.keys(expr.orelse, module)])
        if isinstance(expr, ast.BoolOp):
            return self._union([self.keys(v, module) for v in expr.values])
        if isinstance(expr, ast.DictComp):
            iterated = expr.generators[0].iter
            source = iterated.func.value if (isinstance(iterated, ast.Call) and isinstance(
                iterated.func, ast.Attribute)) else iterated
            forwarded = isinstance(source, ast.Attribute) and source.attr == self.forwarded
            return set() if forwarded else None
        if isinstance(expr, ast.Name):
            return self._name(expr, module)
        if isinstance(expr, ast.Call):
            return self._call(expr, module)
        return None

    def _name(self, expr: ast.Name, module: _Module) -> set[str] | None:
        """Assignments to the name in its function (else the module), and its string-keyed
        item assignments and ``update``/``setdefault`` calls there."""
        scope = module.scope(expr)
        values = _assigned(scope, expr.id) or _assigned(module.tree, expr.id, top_level=True)
        if not values:
            return None
        found = [self.keys(v, module) for v in values]
        for node in ast.walk(scope):
            if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == expr.id):
                found.append(_one(self.string(node.slice, module)))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == expr.id):
                if node.func.attr == "update":
                    found += [self.keys(a, module) for a in node.args]
                    found.append({k.arg for k in node.keywords if k.arg} or set())
                elif node.func.attr == "setdefault" and node.args:
                    found.append(_one(self.string(node.args[0], module)))
        return self._union(found)

    def _call(self, expr: ast.Call, module: _Module) -> set[str] | None:
        name = _called(expr)
        if name == "dict":
            return self._union([*(self.keys(a, module) for a in expr.args),
                                *({k.arg} if k.arg else self.keys(k.value, module)
                                  for k in expr.keywords)])
        helper = self.helpers.get(name or "")
        if helper is None:
            return None
        owner, function = helper
        returned = [n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value]
        return self._union([self.keys(v, owner) for v in returned]) if returned else None

    @staticmethod
    def _union(parts: list[set[str] | None]) -> set[str] | None:
        if any(p is None for p in parts):
            return None
        return set().union(*(p for p in parts if p is not None))


def _one(name: str | None) -> set[str] | None:
    return None if name is None else {name}


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(
        func, ast.Attribute) else None


def _assigned(scope: ast.AST, name: str, *, top_level: bool = False) -> list[ast.expr]:
    """Values assigned to ``name`` in ``scope`` (only its own statements if ``top_level``)."""
    nodes = scope.body if top_level and isinstance(scope, ast.Module) else ast.walk(scope)
    values = []
    for node in nodes:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            values.append(node.value)
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
              and node.target.id == name and node.value is not None):
            values.append(node.value)
    return values


# --- error bodies ------------------------------------------------------------------------------

def domain_errors(base: type[Exception]) -> dict[str, type[Exception]]:
    """``base`` and every subclass of it (of the modules imported so far), by name."""
    found, queue = {}, [base]
    while queue:
        cls = queue.pop()
        found[cls.__name__] = cls
        queue += cls.__subclasses__()
    return found


def _passes_extra(cls: type[Exception], base: type[Exception]) -> bool:
    """Whether keywords given to ``cls(...)`` become members: ``base``'s own constructor, or
    one that takes ``**kwargs`` (assumed to pass them on)."""
    init = cls.__init__
    if init is base.__init__:
        return True
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values())


def problem_members(texts: Iterable[Source], errors: Mapping[str, type[Exception]],
                    base: str = "DomainError") -> Scan:
    """Every member an error body can carry beyond what a route's success returns.

    Scans calls constructing an error class of ``errors`` (whose constructor passes keywords
    on), ``super().__init__(...)`` inside such classes, assignments to an error's ``.extra``,
    calls to the problem builder ``problem(...)``, and literal bodies sent as problem+json.
    ``field`` is the one keyword that is no member (it names the input in ``errors``). A member
    whose value is a literal object adds ``member.key``; a literal list of objects
    ``member[].key``.
    """
    modules = [_Module(label, text) for label, text in texts]
    resolver, scan = _Resolver(modules, forwarded="extra"), Scan()
    root = errors[base]
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call):
                _problem_call(node, module, errors, root, resolver, scan)
            elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                _extra_assignment(node, module, base, resolver, scan)
    return scan


def _problem_call(node: ast.Call, module: _Module, errors: Mapping[str, type[Exception]],
                  root: type[Exception], resolver: _Resolver, scan: Scan) -> None:
    name = _called(node) or ""
    if name in errors and _passes_extra(errors[name], root):
        _members(node.keywords, node, module, resolver, scan)
    elif name == "problem":
        _members([k for k in node.keywords if k.arg not in PROBLEM_PARAMETERS], node, module,
                 resolver, scan)
    elif name == "__init__" and isinstance(node.func, ast.Attribute) and isinstance(
            node.func.value, ast.Call) and _called(node.func.value) == "super":
        owner = module.enclosing(node, (ast.ClassDef,))
        parent = _parent_error(owner, errors)
        if parent is not None and _passes_extra(parent, root):
            _members(node.keywords, node, module, resolver, scan)
    elif name in ("update", "setdefault") and isinstance(node.func, ast.Attribute) and \
            isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "extra":
        keys = (resolver.keys(node.args[0], module) if name == "update" and node.args
                else _one(resolver.string(node.args[0] if node.args else None, module)))
        _add_all(keys, node, module, scan)
    media = next((k.value for k in node.keywords if k.arg == "media_type"), None)
    if media is not None and (resolver.string(media, module) == "application/problem+json" or (
            isinstance(media, ast.Name) and media.id == "PROBLEM_JSON")):
        body = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == "content"), None)
        if isinstance(body, ast.Dict):
            _add_all(resolver.keys(body, module), node, module, scan)


def _parent_error(owner: ast.AST | None, errors: Mapping[str, type[Exception]]
                  ) -> type[Exception] | None:
    """The error class whose constructor ``super().__init__`` calls inside ``owner``."""
    if not isinstance(owner, ast.ClassDef):
        return None
    if owner.name in errors:
        return errors[owner.name].__mro__[1]
    bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute)
             else "" for b in owner.bases]
    return next((errors[b] for b in bases if b in errors), None)


def _extra_assignment(node: ast.Assign | ast.AugAssign | ast.AnnAssign, module: _Module,
                      base: str, resolver: _Resolver, scan: Scan) -> None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
        if isinstance(target, ast.Attribute) and target.attr == "extra" and node.value:
            owner = module.enclosing(node, (ast.ClassDef,))
            if not (isinstance(owner, ast.ClassDef) and owner.name == base):  # the base's own
                _add_all(resolver.keys(node.value, module), node, module, scan)
        elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute)
              and target.value.attr == "extra"):
            _add_all(_one(resolver.string(target.slice, module)), node, module, scan)


def _members(keywords: list[ast.keyword], node: ast.AST, module: _Module, resolver: _Resolver,
             scan: Scan) -> None:
    where = module.where(node)
    for keyword in keywords:
        if keyword.arg is None:
            keys = resolver.keys(keyword.value, module)
            if keys is None:
                scan.unresolved.append(f"{where}: **{ast.unparse(keyword.value)}")
            for key in keys or ():
                scan.add(key, where)
            continue
        if keyword.arg == "field":
            continue
        scan.add(keyword.arg, where)
        value = keyword.value
        items = value.elts if isinstance(value, ast.List) else [value.elt] if isinstance(
            value, ast.ListComp) else []
        for obj, prefix in [(value, keyword.arg), *((i, f"{keyword.arg}[]") for i in items)]:
            if isinstance(obj, ast.Dict):
                keys = resolver.keys(obj, module)
                if keys is None:
                    scan.unresolved.append(f"{where}: {ast.unparse(obj)}")
                for key in keys or ():
                    scan.add(f"{prefix}.{key}", where)


def _add_all(keys: set[str] | None, node: ast.AST, module: _Module, scan: Scan) -> None:
    if keys is None:
        scan.unresolved.append(f"{module.where(node)}: {ast.unparse(node)[:120]}")
    for key in keys or ():
        scan.add(key, module.where(node))


# --- response headers --------------------------------------------------------------------------

def _headers_object(expr: ast.expr) -> bool:
    """``x.headers``, or ``MutableHeaders(...)`` (a raw ASGI message's headers)."""
    return (isinstance(expr, ast.Attribute) and expr.attr == "headers") or (
        isinstance(expr, ast.Call) and _called(expr) in ("MutableHeaders", "Headers"))


def _raw_headers(target: ast.expr) -> bool:
    """``message["headers"]``: a raw ASGI message's header list."""
    return isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and \
        target.slice.value == "headers"


def response_headers(texts: Iterable[Source]) -> Scan:
    """Every header name set on a response: ``x.headers[name] = ...``, ``x.headers.update(...)``
    (``setdefault``, ``append``), ``headers=`` given to a response or an exception, an
    exception's ``self.headers`` or class-level ``headers``, and raw ASGI ``headers`` lists.
    Headers copied from another response or exception (``exc.headers``) were set, and
    scanned, where they were made."""
    modules = [_Module(label, text) for label, text in texts]
    resolver, scan = _Resolver(modules, forwarded="headers"), Scan()
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                _header_assignment(node, module, resolver, scan)
            elif isinstance(node, ast.Call):
                _header_call(node, module, resolver, scan)
            elif isinstance(node, ast.Dict):
                literal = {resolver.string(k, module): v for k, v in zip(
                    node.keys, node.values, strict=True) if k is not None}
                if "headers" in literal and "type" in literal:  # an ASGI message
                    _add_all(_raw_names(literal["headers"], module, resolver), node, module,
                             scan)
    return scan


def _header_assignment(node: ast.Assign | ast.AugAssign | ast.AnnAssign, module: _Module,
                       resolver: _Resolver, scan: Scan) -> None:
    if node.value is None:
        return
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    in_class = isinstance(module.parent.get(node), ast.ClassDef)
    for target in targets:
        if isinstance(target, ast.Subscript) and _headers_object(target.value):
            _add_all(_one(resolver.string(target.slice, module)), node, module, scan)
        elif isinstance(target, ast.Attribute) and target.attr == "headers" or (
                in_class and isinstance(target, ast.Name) and target.id == "headers"):
            _add_all(resolver.keys(node.value, module), node, module, scan)
        elif _raw_headers(target):
            _add_all(_raw_names(node.value, module, resolver), node, module, scan)


def _header_call(node: ast.Call, module: _Module, resolver: _Resolver, scan: Scan) -> None:
    func = node.func
    if isinstance(func, ast.Attribute) and (_headers_object(func.value)
                                            or _raw_headers(func.value)):
        first = node.args[0] if node.args else None
        if _raw_headers(func.value) and func.attr in ("append", "extend", "insert"):
            items = ast.List(elts=[first]) if func.attr != "extend" and first else first
            _add_all(_raw_names(items, module, resolver), node, module, scan)
        elif func.attr == "update" and first is not None:
            _add_all(resolver.keys(first, module), node, module, scan)
        elif func.attr in ("setdefault", "append", "add_vary_header", "__setitem__"):
            name = "Vary" if func.attr == "add_vary_header" else resolver.string(first, module)
            _add_all(_one(name), node, module, scan)
    for keyword in node.keywords:
        if keyword.arg == "headers" and _called(node) not in OUTGOING:
            _add_all(resolver.keys(keyword.value, module), node, module, scan)


def _raw_names(expr: ast.expr | None, module: _Module, resolver: _Resolver) -> set[str] | None:
    """Names of a raw header list ``[(b"name", b"value"), ...]``."""
    if not isinstance(expr, ast.List | ast.Tuple):
        return None
    names = [resolver.string(e.elts[0], module) if isinstance(e, ast.Tuple) and e.elts
             else None for e in expr.elts]
    return None if None in names else {n for n in names if n is not None}
