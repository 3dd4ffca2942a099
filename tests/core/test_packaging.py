"""The wheel ships every package and data file (issue 27: the installed package missed arldiag.stabilize).

pyproject.toml lists the packages by hand because collectors/ and dashboards/ install as arldiag.collectors and
arldiag.dashboards (setuptools' `find` cannot rename folders). These tests read pyproject.toml and compare it with
the source tree: no build, no install, well under a second. .ci/run also builds the wheel, installs it into a fresh
virtual environment and imports every module from outside the repository."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# source folder -> the package it installs as
ROOTS = {"arldiag": "arldiag", "collectors": "arldiag.collectors", "dashboards": "arldiag.dashboards"}
# files in a package folder that are not data
NOT_DATA = {".py", ".pyc", ".pyo"}


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _setuptools_cfg() -> dict:
    return _pyproject()["tool"]["setuptools"]


def _src_dir(package: str, package_dir: dict[str, str]) -> Path:
    """The folder setuptools builds `package` from: the longest package-dir prefix, then the remaining parts."""
    parts = package.split(".")
    for i in range(len(parts), -1, -1):
        key = ".".join(parts[:i])
        if key in package_dir:
            return ROOT.joinpath(package_dir[key], *parts[i:])
    return ROOT.joinpath(*parts)


def _walk(folder: Path):
    for d in sorted([folder, *folder.rglob("*")]):
        if d.is_dir() and "__pycache__" not in d.parts and not d.name.startswith("."):
            yield d


def _packages_on_disk() -> dict[str, Path]:
    """Every folder with an __init__.py under arldiag/, collectors/ and dashboards/, named as it installs."""
    found = {}
    for src, name in ROOTS.items():
        for d in _walk(ROOT / src):
            if (d / "__init__.py").is_file():
                rel = d.relative_to(ROOT / src).parts
                found[".".join((name, *rel))] = d
    return found


def _shipped_data(package: str, src: Path, package_data: dict[str, list[str]]) -> set[Path]:
    """The files setuptools copies for `package`: its package-data globs (and the "*" key's), relative to its folder."""
    files = set()
    for pattern in [*package_data.get(package, []), *package_data.get("*", [])]:
        files.update(p.resolve() for p in src.glob(pattern) if p.is_file())
    return files


def _data_on_disk(src: Path, subpackages: set[Path]) -> set[Path]:
    """The non-Python files of one package folder, not counting those of its subpackages."""
    out = set()
    for f in src.rglob("*"):
        if not f.is_file() or f.suffix in NOT_DATA or "__pycache__" in f.parts or f.name.startswith("."):
            continue
        if any(sub != src and src in sub.parents and sub in f.parents for sub in subpackages):
            continue  # it belongs to a subpackage
        out.add(f.resolve())
    return out


def test_every_package_folder_is_shipped():
    cfg = _setuptools_cfg()
    listed = cfg["packages"]
    assert isinstance(listed, list), "tool.setuptools.packages: expected an explicit list (see the comment above it)"
    on_disk = _packages_on_disk()
    missing = sorted(set(on_disk) - set(listed))
    assert not missing, f"package folders not in pyproject.toml's tool.setuptools.packages (not in the wheel): {missing}"
    for name in listed:  # a listed package builds from the folder the test found for it
        src = _src_dir(name, cfg.get("package-dir", {}))
        assert (src / "__init__.py").is_file(), f"{name}: listed, but {src.relative_to(ROOT)} has no __init__.py"
        assert on_disk[name] == src, f"{name}: built from {src}, found at {on_disk[name]}"


def test_no_python_folder_without_init():
    """A folder of modules without an __init__.py would be silently left out of an explicit package list."""
    bad = [str(d.relative_to(ROOT)) for src in ROOTS for d in _walk(ROOT / src)
           if any(d.glob("*.py")) and not (d / "__init__.py").is_file()]
    assert not bad, f"folders with Python modules but no __init__.py (not shipped): {bad}"


def test_package_data_is_shipped():
    cfg = _setuptools_cfg()
    package_dir, package_data = cfg.get("package-dir", {}), cfg.get("package-data", {})
    listed = set(cfg["packages"])
    stale = sorted(set(package_data) - listed - {"*", ""})
    assert not stale, f"package-data keys that are not shipped packages (their globs copy nothing): {stale}"
    folders = {_src_dir(p, package_dir).resolve() for p in listed}
    shipped: set[Path] = set()
    for package in sorted(listed):
        src = _src_dir(package, package_dir).resolve()
        included = _shipped_data(package, src, package_data)
        shipped |= included
        left_out = sorted(str(f.relative_to(ROOT)) for f in _data_on_disk(src, folders) - included)
        assert not left_out, f"{package}: data files no package-data glob ships: {left_out}"
    # the files arldiag reads at run time, named, so that the check above cannot pass by their going missing
    for rel in ["arldiag/py.typed", "arldiag/detectors/calibrated.json", "dashboards/assets/style.css"]:
        assert (ROOT / rel).resolve() in shipped, f"{rel} is not shipped"


def test_entry_points_name_shipped_modules():
    project = _pyproject()["project"]
    cfg = _setuptools_cfg()
    targets = list(project.get("scripts", {}).values())
    for group in project.get("entry-points", {}).values():
        targets += list(group.values())
    for target in targets:
        module = target.split(":")[0]
        package, _, leaf = module.rpartition(".")
        assert package in cfg["packages"], f"entry point {target}: package {package} is not shipped"
        src = _src_dir(package, cfg.get("package-dir", {}))
        assert (src / f"{leaf}.py").is_file() or (src / leaf / "__init__.py").is_file(), \
            f"entry point {target}: no module {module} in {src.relative_to(ROOT)}"


def test_setuptools_reads_the_same_configuration():
    """What setuptools itself makes of pyproject.toml (no build: it only parses the configuration)."""
    pytest.importorskip("setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    dist = Distribution()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_configuration(dist, str(ROOT / "pyproject.toml"))
    assert sorted(dist.packages) == sorted(_packages_on_disk())
    cfg = _setuptools_cfg()
    assert dist.package_dir == cfg["package-dir"]
    assert {k: sorted(v) for k, v in dist.package_data.items()} == \
        {k: sorted(v) for k, v in cfg["package-data"].items()}
