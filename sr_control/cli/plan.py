"""``vllm-sr config plan | apply | versions | rollback``: edits to a live config, as one transaction each."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from sr_control.cli.config import Format, FormatOption
from sr_control.cli.errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, fail
from sr_control.config import load as loader
from sr_control.config.errors import ConfigUnreadable
from sr_control.operate import apply as applying
from sr_control.operate import plan as planning
from sr_control.operate.live import XDS_STATUS, Unreachable, get, get_json, get_text, legacy_forms
from sr_control.operate.status import judge_node, status_ports

EXIT_RISKY = 3


def live_source(xds: str, version: str | None = None) -> tuple[str, str]:
    """(version, source text) of ``version``, or of what the control plane serves now."""
    if version is None:
        version = get_json(xds, "/versions").get("live")
        if not version:
            raise Unreachable(f"{xds}: the control plane serves no version yet")
    status, body = get(xds, f"/versions/{version}")
    if status == 403:
        raise Unreachable(f"{xds} serves a version's source text to loopback only: {_detail(body)}")
    if status != 200:
        raise Unreachable(f"{xds}: the source of version {version} is not kept (GET /versions/{version})")
    return str(version), body.decode("utf-8")


def live_legacy(xds: str, sidecars: list[str] | None) -> dict[str, int] | None:
    """Listener -> 4.0-only requests the sidecars counted (``sidecars``, else those the control
    plane's nodes tell); None when one does not answer or one cannot be found."""
    if sidecars is None:
        plane = get_json(xds, "/status")
        sidecars, unseen = status_ports([judge_node(n, {}, []) for n in plane.get("nodes", [])])
        if unseen:
            return None
    total: dict[str, int] = {}
    for address in sidecars:
        try:
            forms = legacy_forms(get_text(address, "/metrics"))
        except Unreachable:
            return None
        for listener, counts in forms.items():
            total[listener] = total.get(listener, 0) + sum(counts.values())
    return total


def _problems(exc: planning.Invalid) -> None:
    for p in exc.problems:
        field = f" {p['path']}:" if p.get("path") else ""
        typer.echo(f"{p['file']}:{p.get('line', 0)}:{p.get('column', 0)}:{field} {p['message']}", err=True)


def plan(
    file: Annotated[Path, typer.Argument(help="The edited config.", show_default=False)],
    against: Annotated[
        str,
        typer.Option(
            metavar="HOST:PORT|OLD_FILE",
            help="Compare with what a control plane serves (its status port) or with a config file.",
        ),
    ] = XDS_STATUS,
    sidecar: Annotated[
        list[str] | None,
        typer.Option(
            "--sidecar",
            metavar="HOST:PORT",
            help=(
                "Sidecar status ports whose 4.0-only form counters are read "
                "(default: those the control plane's nodes tell)."
            ),
            show_default=False,
        ),
    ] = None,
    format: FormatOption = Format.text,
) -> None:
    """Show what FILE would change if it went live.

    Lists the listeners, routes, clusters and sidecar data added, changed (with the fields that
    differ) and removed, the models and members gained or lost per listener, and warns of risky
    changes: a listener or an API removed, a schema switch from 4.0 to 5.0 while clients still
    send 4.0-only forms (read from the sidecars' counters; unknown against a file, so risky).

    Exit 0 when nothing is risky, 3 when something is, 1 when FILE is invalid, 2 when a file
    or the control plane cannot be read.

    \b
    Example:
      vllm-sr config plan router.yaml                       # against the live control plane
      vllm-sr config plan router.yaml --against old.yaml --format json
    """
    try:
        new_text = loader.read_text(file)
    except ConfigUnreadable as exc:
        raise fail(str(exc), EXIT_UNREADABLE) from None
    legacy: dict[str, int] | None = None
    if Path(against).is_file():
        old_text, old_name = loader.read_text(Path(against)), against
    else:
        try:
            version, old_text = live_source(against)
        except Unreachable as exc:
            raise fail(f"error: cannot read the live config: {exc}", EXIT_UNREADABLE) from None
        old_name = f"live {version} ({against})"
        try:
            legacy = live_legacy(against, sidecar or None)
        except Unreachable as exc:
            raise fail(f"error: cannot read the live config: {exc}", EXIT_UNREADABLE) from None
    try:
        result = planning.plan(new_text, str(file), old_text, old_name, legacy=legacy)
    except planning.Invalid as exc:
        _problems(exc)
        raise fail(f"{file}: invalid; nothing to plan", EXIT_INVALID) from None
    _print(result, planning.render, format)
    raise typer.Exit(EXIT_RISKY if result["risky"] else EXIT_OK)


def _print(result: dict[str, Any], render: Any, format: Format) -> None:
    typer.echo(json.dumps(result, indent=2) if format is Format.json else render(result))


XdsOption = Annotated[
    str, typer.Option("--xds", metavar="HOST:PORT", help="The control plane's status port (vllm-sr xds serve).")
]
TimeoutOption = Annotated[
    float, typer.Option(help="Seconds to wait for the control plane to serve it and every node to ACK.", min=1)
]


def _node_line(node: dict[str, Any]) -> str:
    return f"  ACK  {node['kind']:7} {node['id']} ({node['protocol']}, {node['peer']}) holds {node['version']}"


def _live_status(xds: str) -> dict[str, Any]:
    try:
        status: dict[str, Any] = get_json(xds, "/status")
    except Unreachable as exc:
        raise fail(f"error: the control plane does not answer: {exc}", EXIT_UNREADABLE) from None
    if not status.get("config"):
        raise fail(f"error: {xds} names no config file", EXIT_UNREADABLE)
    return status


def _refused_message(outcome: Any) -> str:
    node, nack = outcome.refused_by, outcome.refused_by["nack"]
    return f"{node['id']} refused {nack['type']} of version {outcome.version}: {nack['message']}"


def apply(
    file: Annotated[Path, typer.Argument(help="The config to put live.", show_default=False)],
    expect: Annotated[
        str | None,
        typer.Option(
            metavar="VERSION",
            help="Refuse unless this is the live version (compare-and-swap: another edit may have got there first).",
            show_default=False,
        ),
    ] = None,
    xds: XdsOption = XDS_STATUS,
    timeout: TimeoutOption = 60.0,
) -> None:
    """Put FILE live; roll it back when an Envoy refuses it.

    Validates FILE; checks the live version against --expect (and that nobody saved an edit
    that is not live yet); replaces the control plane's watched file atomically (rename); then
    prints each node as it ACKs. When an Envoy NACKs the new version, the previous text is put
    back at once, every node returns to the previous version, and the command exits 1 naming
    the node and Envoy's error. The control plane must share this host's file system.

    Exit 0 when every node holds the new version; 1 when FILE is invalid, --expect is stale,
    an Envoy refused it (rolled back) or a node did not ACK in time; 2 when a file or the
    control plane cannot be read.

    \b
    Example:
      vllm-sr config apply router.yaml --expect "$(vllm-sr config versions --live)"
    """
    try:
        text = loader.read_text(file)
        planning.load(text, str(file))
    except ConfigUnreadable as exc:
        raise fail(str(exc), EXIT_UNREADABLE) from None
    except planning.Invalid as exc:
        _problems(exc)
        raise fail(f"{file}: invalid; nothing was written", EXIT_INVALID) from None
    before = _live_status(xds)
    target = Path(before["config"])
    with applying.edit_lock(target):
        before = _live_status(xds)  # read again under the lock: another apply may just have finished
        live = before.get("version")
        if expect is not None and expect != live:
            raise fail(
                f"refused: the live version is {live}, not {expect}: another edit got there first; "
                "plan against the live version and apply again",
                EXIT_INVALID,
            )
        try:
            pending = bool(live) and applying.pending_edit(xds, str(live), target)
        except Unreachable as exc:
            raise fail(f"error: {exc}", EXIT_UNREADABLE) from None
        if pending:
            raise fail(
                f"refused: {target} holds an edit that is not live (invalid, or not read yet); "
                "`vllm-sr status` shows why",
                EXIT_INVALID,
            )
        previous = applying.write_live(target, text)
        typer.echo(f"wrote {target}; live was {live}")
        outcome = applying.follow(xds, before, timeout=timeout, on_node=lambda n: typer.echo(_node_line(n)))
        if outcome.result == "ok":
            typer.echo(f"live: {outcome.version} on {len(outcome.nodes)} node(s)")
            raise typer.Exit(EXIT_OK)
        if outcome.result == "invalid":
            for p in outcome.problems:
                typer.echo(f"{p.get('file')}:{p.get('line')}:{p.get('column')}: {p.get('message')}", err=True)
            raise fail("the control plane refused the config; the previous version keeps serving", EXIT_INVALID)
        if outcome.result == "timeout":
            raise fail(
                f"not every node ACKed {outcome.version} within {timeout:.0f} s: {', '.join(outcome.behind)} "
                "(not rolled back; `vllm-sr status` shows where they stand)",
                EXIT_INVALID,
            )
        typer.echo(f"NACK {_refused_message(outcome)}", err=True)
        if previous is None:
            raise fail("there was no previous config to put back", EXIT_INVALID)
        mid = _live_status(xds)
        applying.write_live(target, previous)
        back = applying.follow(xds, mid, timeout=timeout, on_node=lambda n: typer.echo(_node_line(n)))
        if back.result == "ok":
            raise fail(f"rolled back: {back.version} is live again on {len(back.nodes)} node(s)", EXIT_INVALID)
        raise fail(f"rolling back did not complete ({back.result}); `vllm-sr status` shows where nodes stand")


def versions(
    xds: XdsOption = XDS_STATUS,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Read the versions kept under DIR (the control plane's --state-dir) instead of asking it.",
            show_default=False,
        ),
    ] = None,
    live_only: Annotated[bool, typer.Option("--live", help="Print only the live version.")] = False,
    format: FormatOption = Format.text,
) -> None:
    """List the versions served, newest first.

    The control plane keeps the last --keep (default 20) versions and their source text under
    its state directory, so the list outlives a restart. `vllm-sr config rollback VERSION`
    puts one back.

    Exit 0; 2 when the control plane (or DIR) cannot be read.

    \b
    Example:
      vllm-sr config versions
      vllm-sr config versions --state-dir .vllm-sr --format json
    """
    if state_dir is not None:
        from sr_control.xds.versions import VersionStore

        entries = VersionStore(state_dir / "versions").entries()
        doc: dict[str, Any] = {"live": entries[0]["version"] if entries else None, "versions": entries}
    else:
        try:
            doc = get_json(xds, "/versions")
        except Unreachable as exc:
            raise fail(f"error: the control plane does not answer: {exc}", EXIT_UNREADABLE) from None
    if live_only:
        typer.echo(doc.get("live") or "")
    elif format is Format.json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        for e in doc["versions"]:
            mark = "*" if e["version"] == doc.get("live") else " "
            typer.echo(f"{mark} {e['version']}  {e['at']}  generation {e.get('generation', '?')}  {e['bytes']} bytes")
    raise typer.Exit(EXIT_OK)


def get_config(
    version: Annotated[
        str | None,
        typer.Argument(help="A version `vllm-sr config versions` lists. Default: the live one.", show_default=False),
    ] = None,
    xds: XdsOption = XDS_STATUS,
) -> None:
    """Print the source text of the live config (or of a kept version).

    The text as it was saved, comments included: what `config plan` compares an edit with and
    what `config rollback` would put back. The control plane answers it to callers on its own
    host only (ssh, or `kubectl port-forward`, to reach it).

    Exit 0; 2 when the version is not kept or the control plane cannot be read.

    \b
    Example:
      vllm-sr config get > live.yaml
      vllm-sr config get 1e45d0df984883c4 | diff - router.yaml
    """
    try:
        _, text = live_source(xds, version)
    except Unreachable as exc:
        raise fail(f"error: {exc}", EXIT_UNREADABLE) from None
    typer.echo(text, nl=False)
    raise typer.Exit(EXIT_OK)


def rollback(
    version: Annotated[str, typer.Argument(help="A version `vllm-sr config versions` lists.", show_default=False)],
    xds: XdsOption = XDS_STATUS,
    configmap: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help=(
                "The config is this Kubernetes ConfigMap's: patch it through the Kubernetes API "
                "(or, without the rights, print the kubectl command)."
            ),
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            help="The ConfigMap's namespace. Default: the kubeconfig context's (or the pod's).",
            metavar="NS",
            show_default=False,
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            help="The ConfigMap's key holding the config. Default: the watched file's name.",
            metavar="KEY",
            show_default=False,
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="How to reach the Kubernetes API. Default: $KUBECONFIG, else ~/.kube/config, else the pod's account.",
            metavar="FILE",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            help=(
                "Seconds to wait for the control plane to serve it and every node to ACK. "
                "Default: 60; 180 for a ConfigMap (the kubelet rewrites the mounted file at its sync, about a minute)."
            ),
            min=1,
            show_default=False,
        ),
    ] = None,
) -> None:
    """Put an earlier version's source back live.

    Writes the version's source text over the control plane's watched file atomically
    (rename), so it goes live by the usual path and shows up on top of `config versions`;
    then prints each node as it ACKs. For a config mounted from a ConfigMap (--configmap),
    patches the ConfigMap's key through the Kubernetes API and follows the nodes the same way
    once the kubelet has rewritten the file; without the rights (RBAC) or a client, saves the
    patch to a file and prints the kubectl command that applies it.

    Exit 0 when every node holds the version (or the kubectl command was printed); 1 when a
    node refused it or did not ACK in time; 2 when the version is not kept or the control plane
    cannot be read.

    \b
    Example:
      vllm-sr config versions
      vllm-sr config rollback 1e45d0df984883c4
      vllm-sr config rollback 1e45d0df984883c4 --configmap vllm-sr-config --namespace vllm-sr
    """
    before = _live_status(xds)
    status, body = get(xds, f"/versions/{version}")
    if status == 403:
        raise fail(f"error: {xds} serves a version's source text to loopback only: {_detail(body)}", EXIT_UNREADABLE)
    if status != 200:
        raise fail(f"error: version {version} is not kept (`vllm-sr config versions` lists them)", EXIT_UNREADABLE)
    text = body.decode("utf-8")
    target = Path(before["config"])
    if configmap is not None or (target.parent / "..data").is_symlink():
        _rollback_configmap(xds, before, version, text, configmap, namespace, key or target.name, kubeconfig, timeout)
    timeout = timeout or 60.0
    with applying.edit_lock(target):
        before = _live_status(xds)
        applying.write_live(target, text)
        typer.echo(f"wrote version {version} to {target}; live was {before.get('version')}")
        outcome = applying.follow(xds, before, timeout=timeout, on_node=lambda n: typer.echo(_node_line(n)))
    _followed(outcome, timeout)


def _detail(body: bytes) -> str:
    try:
        return str(json.loads(body)["detail"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace").strip()


def _followed(outcome: applying.Outcome, timeout: float) -> None:
    """Exit as a rollback's outcome says."""
    if outcome.result == "ok":
        typer.echo(f"live: {outcome.version} on {len(outcome.nodes)} node(s)")
        raise typer.Exit(EXIT_OK)
    if outcome.result == "refused":
        raise fail(f"NACK {_refused_message(outcome)}", EXIT_INVALID)
    if outcome.result == "invalid":
        raise fail("the control plane refused the version's text; the previous version keeps serving", EXIT_INVALID)
    raise fail(f"not every node ACKed within {timeout:.0f} s: {', '.join(outcome.behind)}", EXIT_INVALID)


def _rollback_configmap(
    xds: str,
    before: dict[str, Any],
    version: str,
    text: str,
    name: str | None,
    namespace: str | None,
    key: str,
    kubeconfig: Path | None,
    timeout: float | None,
) -> None:
    """Patch the ConfigMap and follow the nodes; else save the patch and print the kubectl command."""
    from sr_control.operate import configmap as cm

    client, why, default_namespace = None, "", "default"
    if name is None:
        why = "the config is mounted from a ConfigMap whose name this host cannot see (give --configmap NAME)"
    else:
        path = cm.kubeconfig_path(kubeconfig)
        if path is None and "KUBERNETES_SERVICE_HOST" not in os.environ:
            why = "no Kubernetes client: no --kubeconfig, $KUBECONFIG or ~/.kube/config, and not in a pod"
        else:
            from sr_control.pools.kubernetes import api_client

            try:
                client, default_namespace = api_client(path)
            except ValueError as exc:
                why = str(exc)
    ns = namespace or default_namespace
    if client is not None and name is not None:
        try:
            patched = cm.put_back(client, ns, name, key, text)
        except cm.ConfigMapRefused as exc:
            why = f"the Kubernetes API refused: {exc}"
        else:
            if not patched and version == before.get("version"):
                typer.echo(f"ConfigMap {ns}/{name} key {key} holds version {version} already, and it is live")
                raise typer.Exit(EXIT_OK)
            done = "patched" if patched else "found it holding"
            typer.echo(
                f"{done} ConfigMap {ns}/{name} key {key} with version {version}; live was "
                f"{before.get('version')}; waiting for the kubelet to write the file"
            )
            wait = timeout or 180.0
            outcome = applying.follow(xds, before, timeout=wait, on_node=lambda n: typer.echo(_node_line(n)))
            _followed(outcome, wait)
    patch = cm.save_patch(Path.cwd(), version, key, text)
    typer.echo(f"not patched: {why}")
    typer.echo(f"saved version {version} as a patch of key {key} to {patch}. Apply it with:")
    typer.echo(f"  {cm.kubectl_command(ns, name or '<configmap>', patch)}")
    raise typer.Exit(EXIT_OK)
