"""Router config -> Envoy resources (listeners, routes, clusters, sidecar data) and bootstraps."""

from sr_control.compiler.build import bootstrap, compile, static_bootstrap
from sr_control.compiler.consistency import Inconsistent, consistency_problems, consistent
from sr_control.compiler.errors import CompileError
from sr_control.compiler.resources import Resource, Resources
from sr_control.compiler.settings import Address, Settings

__all__ = [
    "Address",
    "CompileError",
    "Inconsistent",
    "Resource",
    "Resources",
    "Settings",
    "bootstrap",
    "compile",
    "consistency_problems",
    "consistent",
    "static_bootstrap",
]
