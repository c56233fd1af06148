"""The package's folders are its layers: every module of `ldpfleet` is read with `ast` (imports
at any depth, relative and absolute, lazy ones inside functions included) and checked for

- no import cycle (each strongly connected component of the import graph is reported);
- no product module (core, mqtt, broker, provision, service) importing ldpfleet.eval,
  ldpfleet.loadgen, ldpfleet.commands or the tests, and core importing no other part of
  ldpfleet;
- no module over 500 lines unless its docstring has a line starting with "Size:" saying why.

Importing `a.b.c` also runs the `__init__` of `a` and `a.b`; those implicit parent imports are
not edges here (a package's `__init__` importing its own submodules would otherwise always be
a cycle), only what a module names.
"""
import ast
import os

import ldpfleet

PACKAGE = "ldpfleet"
ROOT = os.path.dirname(os.path.abspath(ldpfleet.__file__))
PRODUCT = ("core", "mqtt", "broker", "provision", "service")
TOOL_LAYERS = ("eval", "loadgen", "commands")
TEST_PACKAGES = ("tests", "support")
MAX_LINES = 500


def _modules() -> dict:
    """{dotted module name: path} of every .py file of the package."""
    found = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join([PACKAGE] + rel)] = os.path.join(folder, name)
    return found


MODULES = _modules()
TREES = {}


def _tree(module: str) -> ast.Module:
    if module not in TREES:
        with open(MODULES[module], encoding="utf-8") as f:
            TREES[module] = ast.parse(f.read(), MODULES[module])
    return TREES[module]


def _is_package(module: str) -> bool:
    return MODULES[module].endswith("__init__.py")


def _imported_names(module: str) -> set:
    """Every absolute dotted name `module` imports (`from X import Y` gives X and X.Y)."""
    names = set()
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module
            names.add(target)
            names.update("%s.%s" % (target, alias.name) for alias in node.names)
    return names


def _edges(module: str) -> set:
    """The ldpfleet modules `module` imports (the longest existing module of each name)."""
    out = set()
    for name in _imported_names(module):
        parts = name.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        if parts and ".".join(parts) != module:
            out.add(".".join(parts))
    return out


GRAPH = {module: _edges(module) for module in MODULES}


def _components(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _layer(module: str):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_the_walk_sees_the_package():
    assert "ldpfleet.cli" in MODULES and "ldpfleet.core.errors" in MODULES
    assert "ldpfleet.core.errors" in GRAPH["ldpfleet.cli"]  # a lazy import inside a function
    assert "ldpfleet.commands.common" in GRAPH["ldpfleet.commands.serve"]  # a relative one


def test_the_component_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _components(graph) == [["a", "b", "c"]]


def test_no_import_cycle():
    cycles = _components(GRAPH)
    assert not cycles, "import cycles (each a strongly connected component):\n" + "\n".join(
        "  " + " <-> ".join(component) for component in cycles)


def test_product_layers_import_no_tool_layer_and_no_tests():
    bad = []
    for module in sorted(MODULES):
        layer = _layer(module)
        if layer not in PRODUCT:
            continue
        for name in sorted(_imported_names(module)):
            top = name.split(".")[0]
            if top in TEST_PACKAGES:
                bad.append("%s imports %s (tests)" % (module, name))
        for target in sorted(GRAPH[module]):
            if _layer(target) in TOOL_LAYERS:
                bad.append("%s imports %s" % (module, target))
            elif layer == "core" and _layer(target) != "core" and target != PACKAGE:
                bad.append("%s (core) imports %s" % (module, target))
    assert not bad, "layer rule broken:\n" + "\n".join("  " + line for line in bad)


def test_no_module_over_500_lines_without_a_reason():
    bad = []
    for module, path in sorted(MODULES.items()):
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(_tree(module)) or ""
        if not any(line.strip().startswith("Size:") for line in doc.splitlines()):
            bad.append("%s: %d lines, no 'Size:' line in its docstring" % (module, lines))
    assert not bad, "modules over %d lines:\n%s" % (MAX_LINES, "\n".join("  " + b for b in bad))
