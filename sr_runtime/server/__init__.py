"""`vllm-srun serve`: the System One API over HTTP, in front of one decision engine.

app = create_app(ServerSettings("default"))     # a Starlette app; its lifespan loads the model
"""

from sr_runtime.server.app import create_app
from sr_runtime.server.settings import ServerSettings, SettingsError

__all__ = ["ServerSettings", "SettingsError", "create_app"]
