"""Every command is a thin layer over the library: it calls one ``testset_builder.api`` function for its work and
reaches into no stage, store or hub itself; the library decides no exit code and says what each function returns."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "testset_builder" / "cli"
API = ROOT / "testset_builder" / "api"
BELOW_THE_LIBRARY = ("stages", "store", "hub")  # what only the library may reach


def is_command(function: ast.FunctionDef) -> bool:
    """Whether a function is registered as a command (``@app.command()`` or ``@app.command("name")``)."""
    for decorator in function.decorator_list:
        called = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(called, ast.Attribute) and called.attr == "command":
            return True
    return False


def api_calls(node: ast.AST) -> set[str]:
    """The ``api.NAME(...)`` calls under ``node``."""
    return {
        call.func.attr
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "api"
    }


def local_calls(node: ast.AST, module: str, helpers: dict[str, ast.FunctionDef]) -> set[str]:
    """The helper functions of the cli package called under ``node`` (in ``module``): ``name(...)`` for the module's
    own, ``other_module.name(...)`` for another cli module's (a command's body kept apart from its declaration)."""
    called = set()
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        if isinstance(call.func, ast.Name):
            called.add(f"{module}.{call.func.id}")
        elif isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
            called.add(f"{call.func.value.id}.{call.func.attr}")
    return called & helpers.keys()


def commands(folder: Path = CLI) -> dict[str, set[str]]:
    """Each command (module:function) and the api functions it calls, in its body and in the helpers of the cli
    package it calls (followed through the helpers they call)."""
    trees = {path.stem: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.py"))}
    functions = {
        (module, node.name): node for module, tree in trees.items() for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }  # fmt: skip
    helpers = {f"{module}.{name}": node for (module, name), node in functions.items() if not is_command(node)}
    found = {}
    for (module, name), node in functions.items():
        if not is_command(node):
            continue
        seen, todo, calls = set(), [(module, node)], set()
        while todo:
            where, current = todo.pop()
            calls |= api_calls(current)
            for helper in local_calls(current, where, helpers) - seen:
                seen.add(helper)
                todo.append((helper.split(".", 1)[0], helpers[helper]))
        found[f"{module}:{name}"] = calls
    return found


def test_every_command_calls_exactly_one_api_function_for_its_work():
    from testset_builder.cli import PIPELINE

    found = commands()
    assert len(found) == len(PIPELINE), "every registered command is found in testset_builder/cli/"
    offenders = {command: sorted(calls) for command, calls in found.items() if len(calls) != 1}
    assert not offenders, f"these commands call other than one api function: {offenders}"


def reaching_below(folder: Path = CLI) -> list[str]:
    """Where modules of ``folder`` import a stage, the store or the hub (file:line)."""
    offenders = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                named = [module] if node.level else [module.removeprefix("testset_builder.")]
                named += [f"{module}.{alias.name}".strip(".") for alias in node.names]
            elif isinstance(node, ast.Import):
                named = [alias.name.removeprefix("testset_builder.") for alias in node.names]
            else:
                continue
            if any(name.split(".")[0] in BELOW_THE_LIBRARY for name in named):
                offenders.append(f"{path.name}:{node.lineno}")
    return offenders


def test_no_command_module_imports_a_stage_the_store_or_the_hub():
    offenders = reaching_below()
    assert not offenders, f"the CLI reaches below the library at {offenders}"


def test_the_checks_find_a_command_that_reaches_past_the_library(tmp_path):
    """The checks above are not vacuous: a command that calls two api functions (one through a helper) and imports
    a stage is caught by both."""
    (tmp_path / "sneaky.py").write_text(
        "from .. import api\n"
        "from ..stages import review\n\n\n"
        "@app.command()\n"
        "def both():\n"
        "    helper()\n"
        "    api.run(None)\n\n\n"
        "def helper():\n"
        "    api.plan(None)\n",
        encoding="utf-8",
    )
    assert commands(tmp_path) == {"sneaky:both": {"run", "plan"}}
    assert reaching_below(tmp_path) == ["sneaky.py:2"]


def test_the_library_decides_no_exit_code():
    offenders = [
        f"{path.name}:{number}"
        for path in sorted(API.glob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "exit_code" in line or "EXIT_" in line
    ]
    assert not offenders, f"exit codes belong to the CLI, not the library: {offenders}"


def test_every_public_api_function_says_what_it_returns():
    missing = [
        f"{path.name}:{node.name}"
        for path in sorted(API.glob("*.py"))
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and node.returns is None
    ]
    assert not missing, f"public api functions without a return annotation: {missing}"


def test_no_api_result_forwards_unknown_attributes():
    forwarding = [
        f"{path.name}:{node.name}"
        for path in sorted(API.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        for method in node.body
        if isinstance(method, ast.FunctionDef) and method.name == "__getattr__"
    ]
    assert not forwarding, f"results read their fields through to another object: {forwarding}"
