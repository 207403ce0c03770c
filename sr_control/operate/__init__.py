"""What an operator asks of a running stack: what is live (status), what an edit would change
(plan), putting an edit live and taking it back (apply, versions, rollback), and sending a request
through a listener. The CLI verbs in ``sr_control/cli`` are thin over these."""
