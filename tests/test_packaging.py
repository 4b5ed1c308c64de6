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


def test_stages_share_helpers_through_common_modules_not_each_other():
    stages = {"propose", "synthesize", "release", "importer"}
    readers_of_every_stage = {"plan"}  # the plan replays each stage's requests to count them; no stage reads it
    offenders = []
    for path in (PACKAGE / "stages").rglob("*.py"):
        own = path.relative_to(PACKAGE / "stages").parts[0].removesuffix(".py")
        if own in readers_of_every_stage:
            continue
        for reader in readers_of_every_stage:
            if re.search(rf"from \.+(stages\.)?{reader}\b", path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT)} imports {reader}")
        for other in stages - {own}:
            if re.search(rf"from \.+(stages\.)?{other}\b", path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT)} imports {other}")
    assert not offenders


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


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the package's modules it imports, where it imports them (at the top or
    inside a function alike; a block under ``if TYPE_CHECKING`` is not an import)."""
    import ast

    def module_of(path: Path) -> str:
        parts = path.relative_to(ROOT).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {module_of(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
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
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                for alias in node.names:  # `from . import x`: the submodule x when there is one
                    found = f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                    graph[name].add(found)
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names)
    return {name: {t for t in targets if t in modules and t != name} for name, targets in graph.items()}


# migration 14's backfill signs and groups the chunks of an older workspace with the corpus code of today: the one
# place the store reaches up, to be frozen into the migration itself (issue 28)
STORE_REACHES_CORPUS = {("testset_builder.store.migrations", "testset_builder.corpus.batches"),
                        ("testset_builder.store.migrations", "testset_builder.corpus.regroup")}  # fmt: skip


def test_the_layers_import_only_downwards():
    graph = import_graph()
    faces = ("cli", "review_ui", "report", "hub", "api", "__main__")
    below_stages = ("labels", "store", "corpus", "llm", "metrics", "retrieval", "export", "records", "config", "tables",
                    "errors", "spans", "prompts", "_hashing", "_threads", "_version", "bundled")  # fmt: skip

    def layer(module: str) -> str:
        return module.split(".")[1] if "." in module else ""

    offenders = []
    for module, targets in graph.items():
        for target in targets:
            if layer(target) == "cli" and layer(module) not in ("cli", "__main__"):
                offenders.append(f"{module} imports the CLI ({target})")
            if layer(module) in below_stages and layer(target) in ("stages", *faces):
                offenders.append(f"{module} (below the stages) imports {target}")
            if layer(module) == "store" and layer(target) == "corpus" and (module, target) not in STORE_REACHES_CORPUS:
                offenders.append(f"{module} (the store) imports {target}")
    assert not offenders, offenders


def test_no_modules_import_each_other_round_a_cycle():
    graph = import_graph()
    for edge in STORE_REACHES_CORPUS:  # the known one, until migration 14 is frozen
        graph[edge[0]].discard(edge[1])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert not cycles, cycles


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
