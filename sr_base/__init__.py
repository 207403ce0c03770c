"""What every server process of ours sets up, the control plane's and the runtime's alike:
logging (``log``), the supervisor of ``--workers N`` (``workers``) and OpenTelemetry tracing,
loaded only when a config or flag turns it on (``tracing``). It stands on ``systemone`` at
most; ``systemone`` itself does no I/O."""
