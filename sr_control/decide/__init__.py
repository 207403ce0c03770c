"""The Decide path: the router's own decisions about an LLM request, as pure functions.

A client sends a *virtual model* (``vllm-sr/router``) as ``model``; the router asks the
signals its routes test of decision models, in one System One request per decision model,
evaluates the routes over the answers, and sends the request to the model the first firing
route names. After the answer, a route's judge may escalate to its next model.

    request.py   LLM body -> parts -> DecideCall (a systemone IR Request); replies -> Answers
    rules.py     the compiled plan; keyword signals; routes over answers -> Decision
    judge.py     after the answer: escalate or keep it
    rewrite.py   the Decision applied to the LLM body (model, system prompt) and headers
    cards.py     every signal against its model's card or declared capabilities
    checks.py    the whole-file config rules, run by ``vllm-sr config validate``

No module here does I/O. ``vllm-sr route`` (sr_control/cli/route.py) runs them against live
decision models; the sidecar's integration is to come (docs/decide/index.md).
"""
