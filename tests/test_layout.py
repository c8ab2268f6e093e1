"""The layout's rules, checked on the source: no import cycles (function-level imports included), the remote code is
exactly `models/`, tiny builders only behind the sanctioned doors, one registry of Hub ids, no `sys.path` edits, thin
scripts, tests that import library modules rather than scripts, and no `SystemExit` outside the command lines."""

import ast
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "modeling_pacs"
REMOTE_CODE_ROOTS = set(sys.stdlib_module_names) | {"torch", "transformers", "peft", "numpy", "PIL"}
# Optional, imported inside functions only when used: ftfy (CLIP's text cleaning), av (video decoding).
OPTIONAL_REMOTE_CODE_ROOTS = {"ftfy", "av"}
# Modules allowed to reach the tiny builders of `testing/`: the `tiny*` aliases and the make-tiny / --tiny commands.
TESTING_IMPORTERS = {"modeling_pacs.loading", "modeling_pacs.cli.main", "modeling_pacs.cli.train_captioner"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(module: str, path: Path) -> dict[str, int]:
    """Package modules `module` imports anywhere (module level, functions, TYPE_CHECKING blocks) -> first line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in candidates:
            while name and name not in MODULES:  # the longest prefix that is a module of the package
                name = name.rpartition(".")[0]
            if name and name != module:
                found.setdefault(name, node.lineno)
    return found


GRAPH = {module: imported_modules(module, path) for module, path in MODULES.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node: str):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}) == [["a", "b", "c"]]


def test_no_import_cycles_among_the_package_modules():
    found = cycles(GRAPH)
    details = [
        " -> ".join(
            f"{module} (line {GRAPH[module].get(component[(i + 1) % len(component)], '?')})"
            for i, module in enumerate(component)
        )  # fmt: skip
        for component in found
    ]
    assert not found, "import cycles:\n" + "\n".join(details)


def test_the_remote_code_is_the_models_folder_and_imports_only_what_a_model_directory_may():
    for path in sorted((PACKAGE / "models").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                # A saved directory is flat: single-dot imports of files that are in it.
                assert node.level == 1 and node.module, f"{path.name}:{node.lineno}: only `from .x import` works"
                assert (PACKAGE / "models" / f"{node.module}.py").is_file(), f"{path.name}:{node.lineno}"
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                roots = {alias.name.split(".")[0] for alias in node.names} if isinstance(node, ast.Import) else {
                    node.module.split(".")[0]}  # fmt: skip
                assert roots <= REMOTE_CODE_ROOTS | OPTIONAL_REMOTE_CODE_ROOTS, f"{path.name}:{node.lineno}: {roots}"
    # Classes that save_pretrained registers live in models/ only (the old path's module, which only raises, aside).
    outside = [path.relative_to(PACKAGE) for path in PACKAGE.rglob("*.py")
               if path.parent != PACKAGE / "models" and path.name.startswith(("configuration_", "modeling_"))
               and path != PACKAGE / "modeling_pacs.py"]  # fmt: skip
    assert not outside


def test_saved_directories_hold_exactly_files_of_the_models_folder(tmp_path):
    from modeling_pacs.testing.pacs import make_tiny_model

    make_tiny_model(tmp_path / "model", seed=0)
    written = {path.name for path in (tmp_path / "model").glob("*.py")}
    assert written and written <= {path.name for path in (PACKAGE / "models").glob("*.py")} - {"__init__.py"}


def test_tiny_builders_are_reached_only_through_the_sanctioned_doors():
    reaching = {
        module
        for module, targets in GRAPH.items()
        if not module.startswith("modeling_pacs.testing")
        and any(t.startswith("modeling_pacs.testing") for t in targets)
    }
    assert reaching <= TESTING_IMPORTERS


def test_one_registry_of_hub_ids():
    """The project's Hub ids appear as string constants only in the registry's specs and the remote-code defaults."""
    from modeling_pacs.registry import PRETRAINED_MODELS

    ours = {hub_id for hub_id in PRETRAINED_MODELS.values() if hub_id.startswith("pacs-pp/")}
    allowed = {*PACKAGE.glob("*/spec.py"), PACKAGE / "models" / "configuration_pearl.py"}
    for path in PACKAGE.rglob("*.py"):
        if path in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        }  # fmt: skip
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                assert node.value not in ours, f"{path.relative_to(REPO_ROOT)}:{node.lineno} defines {node.value}"


def test_the_remote_code_defaults_match_the_registry():
    from modeling_pacs.models.configuration_pacs import PACSConfig
    from modeling_pacs.models.configuration_pearl import DEFAULT_ENCODER_SPECS
    from modeling_pacs.pacs.spec import OFFICIAL_VARIANTS
    from modeling_pacs.registry import DEFAULT_MODEL, PRETRAINED_MODELS

    assert DEFAULT_ENCODER_SPECS["clip"]["path"] == PRETRAINED_MODELS[DEFAULT_MODEL]
    assert PACSConfig().base_model_id == OFFICIAL_VARIANTS[DEFAULT_MODEL].base_model_id


@pytest.mark.parametrize("folder", ["modeling_pacs", "scripts", "benchmarks", "tests", "examples", "space"])
def test_no_sys_path_edits(folder):
    for path in (REPO_ROOT / folder).rglob("*.py"):
        if "fixtures" in path.parts or path == Path(__file__).resolve():  # this file names the calls it looks for
            continue
        text = path.read_text(encoding="utf-8")
        for edit in ("sys.path.insert", "sys.path.append", "sys.path.remove"):
            assert edit not in text, f"{path.relative_to(REPO_ROOT)} edits sys.path ({edit})"


def test_scripts_are_thin_entry_points():
    for path in sorted((REPO_ROOT / "scripts").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        definitions = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        assert not definitions, f"{path.name} defines {definitions}: library logic belongs in modeling_pacs"


def test_tests_import_library_modules_not_scripts():
    """Tests import `modeling_pacs.cli.*`, not `scripts/*.py` by path (they may still run a script in a subprocess)."""
    for path in REPO_ROOT.glob("tests/**/*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("spec_from_file_location"):
                assert "scripts" not in ast.unparse(node), f"{path.relative_to(REPO_ROOT)}:{node.lineno}"


def test_only_the_command_lines_exit():
    """The library raises typed errors (`modeling_pacs/errors.py`); `SystemExit` belongs to `modeling_pacs/cli/`, so a
    notebook's kernel never exits on bad input. Names, attributes, comments and docstrings are all checked."""
    cli = PACKAGE / "cli"
    paths = [*PACKAGE.rglob("*.py"), *(REPO_ROOT / "metric").rglob("*.py"), *(REPO_ROOT / "space").rglob("*.py")]
    found = []
    for path in sorted(path for path in paths if cli not in path.parents):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name == "SystemExit":
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
        found += [
            f"{path.relative_to(REPO_ROOT)}:{number} (text)"
            for number, line in enumerate(text.splitlines(), 1)
            if "SystemExit" in line and f"{path.relative_to(REPO_ROOT)}:{number}" not in found
        ]
    assert not found, "raise an error of modeling_pacs/errors.py instead:\n" + "\n".join(found)
