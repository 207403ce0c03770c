"""``vllm-sr config compile``: the Envoy resources a router config compiles to, as files."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from sr_control.cli.errors import EXIT_INVALID, EXIT_UNREADABLE, fail
from sr_control.compiler import Address, CompileError, Settings, bootstrap, static_bootstrap
from sr_control.compiler import compile as compile_config
from sr_control.compiler.envoy import EnvoyMissing, Validation, validate
from sr_control.compiler.output import documents, write
from sr_control.compiler.protos import PUSH_ORDER, TYPE_NAMES
from sr_control.compiler.settings import XdsTls
from sr_control.config import load as loader


class Format(StrEnum):
    text = "text"
    json = "json"


class Ads(StrEnum):
    sotw = "sotw"
    delta = "delta"


def address(text: str) -> Address:
    try:
        return Address.parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def addresses(text: str) -> tuple[Address, ...]:
    """``HOST:PORT[,HOST:PORT...]``: control planes serving one config, tried in this order."""
    try:
        return tuple(Address.parse(part.strip()) for part in text.split(","))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


# The key and CA of a node's certificate to the control plane (Envoy's bootstrap, the sidecar);
# --xds-cert's help says whose certificate it is.
XdsKeyOption = Annotated[
    str, typer.Option("--xds-key", metavar="PATH", help="ADS over mTLS: its private key.", show_default=False)
]
XdsCaOption = Annotated[
    str,
    typer.Option(
        "--xds-ca",
        metavar="PATH",
        help="ADS over mTLS: the CA the control plane's certificate must chain to.",
        show_default=False,
    ),
]


def xds_tls(cert: str, key: str, ca: str) -> XdsTls | None:
    """The certificate a node presents to the control plane: all three files, or none (plaintext)."""
    given = {"--xds-cert": cert, "--xds-key": key, "--xds-ca": ca}
    if not any(given.values()):
        return None
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise typer.BadParameter(
            f"mTLS to the control plane needs --xds-cert, --xds-key and --xds-ca; missing {', '.join(missing)}"
        )
    return XdsTls(cert=cert, key=key, ca=ca)


def compile_command(
    file: Annotated[Path, typer.Argument(help="The router config to compile.", show_default=False)],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Directory to write the files into.", show_default=False)
    ],
    xds: Annotated[
        str,
        typer.Option(
            "--xds",
            metavar="HOST:PORT[,HOST:PORT]",
            help=(
                "Where Envoy reaches the control plane (bootstrap.yaml); several replicas separated by commas, "
                "a lost stream reopening on another."
            ),
        ),
    ] = "127.0.0.1:18000",
    xds_cert: Annotated[
        str,
        typer.Option(
            "--xds-cert",
            metavar="PATH",
            help="ADS over mTLS: the certificate Envoy presents to the control plane (a path where Envoy runs).",
            show_default=False,
        ),
    ] = "",
    xds_key: XdsKeyOption = "",
    xds_ca: XdsCaOption = "",
    sidecar: Annotated[
        Address,
        typer.Option(
            "--sidecar", parser=address, metavar="HOST:PORT", help="The ext_proc sidecar (HOST:PORT or unix:PATH)."
        ),
    ] = "127.0.0.1:18080",  # type: ignore[assignment]
    admin: Annotated[
        Address, typer.Option("--admin", parser=address, metavar="HOST:PORT", help="Envoy's admin listener.")
    ] = "127.0.0.1:9901",  # type: ignore[assignment]
    node_id: Annotated[str, typer.Option("--node-id", help="Envoy's node ID in bootstrap.yaml.")] = "vllm-sr-envoy",
    ads: Annotated[Ads, typer.Option("--ads", help="xDS protocol in bootstrap.yaml: sotw or delta.")] = Ads.sotw,
    check: Annotated[
        bool,
        typer.Option(
            "--validate", help="Also have Envoy check envoy-static.yaml and bootstrap.yaml (envoy --mode validate)."
        ),
    ] = False,
    format: Annotated[Format, typer.Option("--format", "-f", help="text for people, json for programs.")] = Format.text,
) -> None:
    """Compile a config into Envoy resources.

    Writes listeners.yaml, routes.yaml, clusters.yaml and sidecar.yaml (as served over xDS),
    bootstrap.yaml (Envoy knowing only the control plane) and envoy-static.yaml (everything
    inline, for envoy --mode validate or running without a control plane).
    """
    config = loader.load(file)
    first, *replicas = addresses(xds)
    settings = Settings(
        xds=first,
        xds_replicas=tuple(replicas),
        xds_tls=xds_tls(xds_cert, xds_key, xds_ca),
        sidecar=sidecar,
        admin=admin,
        node_id=node_id,
        ads=ads.value,
    )
    try:
        resources = compile_config(config, settings)
        files = documents(resources, bootstrap(settings), static_bootstrap(config, settings))
    except CompileError as exc:
        raise fail(f"{file}: error: {exc}", EXIT_INVALID) from None
    written = write(output, files)
    checks = _envoy_checks(output) if check else {}
    if format is Format.json:
        types = {TYPE_NAMES[t]: {"version": resources.type_version(t), "count": len(resources[t])} for t in PUSH_ORDER}
        out = {"version": resources.version, "types": types, "files": [str(p) for p in written]}
        if check:
            out["envoy"] = {name: {"ok": v.ok, "output": v.output} for name, v in checks.items()}
        typer.echo(json.dumps(out, indent=2))
    else:
        counts = ", ".join(f"{len(resources[t])} {TYPE_NAMES[t]}" for t in PUSH_ORDER)
        typer.echo(f"{file}: version {resources.version} ({counts})")
        for path in written:
            typer.echo(f"  wrote {path}")
        for name, v in checks.items():
            typer.echo(f"  envoy accepts {name}" if v.ok else f"  envoy rejects {name}: {v.output}")
    if any(not v.ok for v in checks.values()):
        raise typer.Exit(EXIT_INVALID)


def _envoy_checks(directory: Path) -> dict[str, Validation]:
    try:
        return {name: validate(directory / name) for name in ("envoy-static.yaml", "bootstrap.yaml")}
    except EnvoyMissing as exc:
        raise fail(f"error: --validate: {exc}", EXIT_UNREADABLE) from None
