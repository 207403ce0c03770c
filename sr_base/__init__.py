"""What every server process of ours sets up, the control plane's and the runtime's alike:
logging (``log``) and the supervisor of ``--workers N`` (``workers``). It stands on
``systemone`` at most; ``systemone`` itself does no I/O."""
