"""The package works as installed from its wheel, not only from this checkout; the code keeps its agreed shape."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "testset_builder"


def test_every_package_of_the_tree_is_listed_for_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in PACKAGE.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def test_every_folder_of_data_files_is_a_listed_package_so_setuptools_warns_of_none():
    """setuptools warns "Package would be ignored" of each folder it could import that is not listed (one screen of
    warnings each, in every `make demo`'s log), and a later version ignores it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, data = set(config["packages"]), set(config["package-data"])
    roots = {"testset_builder": PACKAGE, **{name: ROOT / folder for name, folder in config["package-dir"].items()}}
    data_folders = set()  # folders of files and no __init__.py: packages only of data
    for name, root in roots.items():
        for folder in [root, *(p for p in root.rglob("*") if p.is_dir() and "__pycache__" not in p.parts)]:
            files = [f for f in folder.iterdir() if f.is_file()]
            if files and not (folder / "__init__.py").exists():
                data_folders.add(".".join([name, *folder.relative_to(root).parts]))
    assert data_folders, "the tree has folders of data files (templates, prompts)"
    assert data_folders <= listed, f"add to [tool.setuptools] packages: {sorted(data_folders - listed)}"
    assert data_folders <= data, f"add to [tool.setuptools.package-data]: {sorted(data_folders - data)}"


def test_sql_lives_in_the_store():
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in PACKAGE.rglob("*.py")
        if "store" not in path.relative_to(PACKAGE).parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bexecute(many)?\(", line)
    ]
    assert not offenders, f"SQL outside testset_builder/store/: {offenders}"


def test_every_error_class_lives_in_errors_py():
    offenders = [
        f"{path.relative_to(ROOT)}: {match}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "errors.py"
        for match in re.findall(
            r"^class (\w+)\((?:\w*Error|TestsetBuilderError)\)", path.read_text(encoding="utf-8"), re.M
        )
    ]
    assert not offenders


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_runs_chunk_synthesize_and_release_without_the_source_tree(
    tmp_path, local_server
):
    source = tmp_path / "source"
    source.mkdir()
    for part in ("pyproject.toml", "README.md", "testset_builder", "configs", "prompts"):
        copy = shutil.copytree if (ROOT / part).is_dir() else shutil.copy2
        copy(
            ROOT / part,
            source / part,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / part).is_dir() else {}),
        )
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(source)], check=True
    )
    (wheel,) = dist.glob("testset_builder-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for packaged in (
        "configs/quickstart.yaml",
        "configs/prices.yaml",
        "prompts/judge/umbrela-chat.md",
        "prompts/synthesize/chat.md",
    ):
        assert f"testset_builder/bundled/{packaged}" in names
    for packaged in ("templates/item.html", "static/htmx.min.js", "static/review.js"):
        assert f"testset_builder/review_ui/{packaged}" in names  # the web reviewer works from a wheel too

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # the dependencies come from this environment's site-packages, appended to the path (its .pth files, among them
    # this checkout's editable finder, are not read); the package itself only from the wheel
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)], check=True)

    work = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "examples" / "corpus", work / "docs")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"

    def cli(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(["testset-builder", *args], cwd=work, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done

    where = subprocess.run(
        [str(python), "-c", "import testset_builder; print(testset_builder.__file__)"], cwd=work, env=env,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(venv)) and str(ROOT) not in where
    assert "kind: local" in cli("config", "quickstart").stdout
    (work / "local.yaml").write_text(
        "generator: {kind: openai, model: gemma-3-270m, base_url: '" + local_server.base_url + "/v1', "
        "prompt_style: completion, timeout_s: 120}\nlimits: {max_in_flight: 2}\n"
        "synthesize: {critic: false, mine: false, styles: {natural: 1.0}}\n",
        encoding="utf-8",
    )
    cli("chunk", "docs", "--workspace", "ws", "--chunker", "markdown", "--size", "600", "--overlap", "60")
    made = cli("synthesize", "-n", "2", "--workspace", "ws", "--config", "local.yaml")
    assert "2 of 2 questions" in made.stdout
    released = cli("release", "--version", "1.0.0", "--workspace", "ws", "--json")
    assert '"queries": 2' in released.stdout
    manifest = (work / "ws" / "releases" / "1.0.0" / "manifest.json").read_text(encoding="utf-8")
    assert str(tmp_path) not in manifest and str(Path.home()) not in manifest
    cli("baseline", "--release", "ws@1.0.0", "--out", "bm25.trec")
    cli("report", "--release", "ws@1.0.0", "--run", "bm25.trec")  # its template is package data
    page = (work / "ws" / "reports" / "1.0.0.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and page.count("<svg") >= 4
    assert "testset-builder run" in cli("init", "new-set").stdout
    assert (work / "new-set" / "testset-builder.yaml").is_file()


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Every module of ``package`` and the package's modules it imports, where it imports them (at the top or
    inside a function alike; a block under ``if TYPE_CHECKING`` is not an import)."""
    import ast

    def module_of(path: Path) -> str:
        parts = path.relative_to(package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {module_of(p): p for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for node in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                for alias in node.names:  # `from . import x`: the submodule x when there is one
                    found = f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                    graph[name].add(found)
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names)
    return {name: {t for t in targets if t in modules and t != name} for name, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm): each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# the stages' package: each module or package in it is one stage, and no stage imports another (they share through
# a lower package: labels/, corpus/, store/ ...), except the plan, which replays every stage's requests to count them
STAGES = "stages"
READS_EVERY_STAGE = "plan"


def upward_imports(graph: dict[str, set[str]], entry_points: set[str]) -> list[str]:
    """The imports that break the layering, which is derived from the tree, not listed: each top-level module or
    package is a room, and a room's floor is above every room it imports, so an import runs upward exactly when it
    closes a circle of rooms. Besides: no room imports an entry point (``entry_points``: the modules a console
    script or ``python -m`` starts), and no stage imports another stage."""
    root = min(graph, key=len).split(".")[0]

    def room(module: str) -> str:
        return ".".join(module.split(".")[:2])

    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        rooms.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
    offenders = []
    for circle in cycles(rooms):
        offenders += [
            f"{module} imports {target}: the rooms {', '.join(circle)} import each other round a circle"
            for module, targets in sorted(graph.items())
            for target in sorted(targets)
            if room(module) in circle and room(target) in circle and room(module) != room(target)
        ]
    entry_rooms = {room(e) for e in entry_points}
    offenders += [
        f"{module} imports the entry point {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if room(target) in entry_rooms and room(module) != room(target) and module != f"{root}.__main__"
    ]

    def stage(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == STAGES else None

    offenders += [
        f"{module} (a stage) imports the stage {target}: share it through a lower package"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if stage(module) and stage(target) and stage(module) not in (stage(target), READS_EVERY_STAGE)
    ]
    return offenders


def entry_points() -> set[str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return {target.partition(":")[0] for target in scripts.values()} | {"testset_builder.__main__"}


def test_the_layers_import_only_downwards():
    assert upward_imports(import_graph(), entry_points()) == []


def test_an_upward_import_added_on_purpose_is_found():
    graph = import_graph()
    graph["testset_builder.store.rows"].add("testset_builder.stages.propose")  # the store reaching up to a stage
    found = upward_imports(graph, entry_points())
    assert "testset_builder.store.rows imports testset_builder.stages.propose" in " ".join(found)
    graph = import_graph()
    graph["testset_builder.stages.propose"].add("testset_builder.stages.selection")  # one stage importing another
    assert upward_imports(graph, entry_points()) == [
        "testset_builder.stages.propose (a stage) imports the stage testset_builder.stages.selection: share it "
        "through a lower package"
    ]


def test_a_package_tree_written_with_an_upward_import_is_refused(tmp_path):
    files = {
        "__init__.py": "",
        "cli.py": "from .stages import ask\n",
        "store/__init__.py": "",
        "store/rows.py": "X = 1\n",
        "stages/__init__.py": "",
        "stages/ask.py": "from ..store.rows import X\n",
        "stages/tell.py": "from ..store import rows\n",
    }
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text, encoding="utf-8")
    assert upward_imports(import_graph(tmp_path / "pkg"), {"pkg.cli"}) == []
    (tmp_path / "pkg" / "store" / "rows.py").write_text("def f():\n    from ..stages.ask import g\n")
    (tmp_path / "pkg" / "stages" / "tell.py").write_text("from .ask import Y\nfrom .. import cli\n")
    found = upward_imports(import_graph(tmp_path / "pkg"), {"pkg.cli"})
    assert (
        "pkg.store.rows imports pkg.stages.ask: the rooms pkg.cli, pkg.stages, pkg.store import each other round a "
        "circle" in found
    )
    assert "pkg.stages.tell imports the entry point pkg.cli" in found
    assert "pkg.stages.tell (a stage) imports the stage pkg.stages.ask: share it through a lower package" in found


def test_no_modules_import_each_other_round_a_cycle():
    assert cycles(import_graph()) == []


def test_the_package_says_the_version_its_wheel_carries():
    from testset_builder import __version__

    assert __version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_reference_guides_say_what_the_code_says():
    from testset_builder.cli.reference import GUIDES

    for name, make in GUIDES.items():
        written = (ROOT / "guides" / name).read_text(encoding="utf-8")
        assert written == make(), f"guides/{name} is out of date: run `make reference`"


def test_every_guide_is_linked_from_the_guides_table_of_contents_and_every_link_resolves():
    contents = (ROOT / "guides" / "README.md").read_text(encoding="utf-8")
    guides = sorted(p.name for p in (ROOT / "guides").glob("*.md") if p.name != "README.md")
    assert [g for g in guides if f"({g})" not in contents] == []
    for page in [ROOT / "README.md", *(ROOT / "guides").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to a missing {target}"
